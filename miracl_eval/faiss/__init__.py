"""Dense retrieval with Faiss: indexes (rule ``dense_index``) and search (rule ``dense_search``)."""
