"""Vector search machinery both storage engines use, over their own store of record (rows.py's port):

rows.py    the port: count, scan (by chunk id, from an id), fetch by ids
matrix.py  the in-memory int8/float32 matrix, its exact re-score, loading and extending it
ann.py     the usearch HNSW graph of a big index (derived data, a file beside the index)
"""
