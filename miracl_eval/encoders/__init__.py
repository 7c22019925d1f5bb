"""Encoders of every model family (temporary registry stub; replaced by the encoders branch)."""
