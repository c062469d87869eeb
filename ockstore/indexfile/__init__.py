"""Index and quantizer files: what an ockstore index keeps in the container of ``ockstore.storage`` (docs/FORMAT.md
sections 11-12, rules I1-I21; inverted files: section 14, rules V1-V10; fast-scan blocks: section 16, rules F1-F5;
files of untrained rows: section 15, rules E1-E5; sq8 ranges: section 17; segments by reference: section 18, rules
S1-S6).

    schema.py       the meta map and section table: writing them, and the open-time checks of a file
    writer.py       IndexWriter (streaming, bounded memory, atomic), build_index, save_quantizer
    reader.py       open_index (read-only mmap, O(1) in N), load_quantizer, file_info
    ivf_schema.py   what an inverted file adds: the ivf meta map, the coarse sections, the list offsets
    ivf_writer.py   IVFIndexWriter (IndexWriter with an IVF): rows sorted list after list through spill files
    kinds.py        which kind of file this is (flat, inverted, fast-scan, stored vectors): the one place that decides
    vectors_file.py files of stored vectors only (a collection's rows before it trains)
    segment_file.py segments by reference: a collection's segment naming its quantizer file and the model's fingerprint

The public names are re-exported by ``ockstore`` itself.
"""
