"""The search stages: the options of a search (options.py), query tables and the scan of codes (scan.py), the code
stores (codes.py: byte codes, 4-bit fast-scan blocks), exact re-ranking (rerank.py), tune (tune.py)."""
