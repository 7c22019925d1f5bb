"""Running a workflow job: the stage runner (logging, errors, GPU leases), the preload server, and
the resource requests that follow the data.
"""
