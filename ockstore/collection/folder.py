"""Opening and creating collection folders: ``open_collection`` (a reader's snapshot or the writer) and
``create_collection`` (a new folder with a fitted quantizer, or with an unfitted one that the collection trains
itself; docs/ARCHITECTURE.md, "Collections for apps")."""

from __future__ import annotations

import errno
import os

from .._index_rows import check_fitted_model, check_store_vectors, resolve_norm_encoding
from .._validation import check_bool, check_choice, check_int
from ..errors import FormatError
from ..indexfile.schema import check_user_metadata
from ..indexfile.writer import save_quantizer
from ..paths import _as_str
from . import names
from .collection import Collection
from .lock import WriterLock
from ..quantizers.params import PARAMETERS
from .manifest import MAX_ID, AutoModel, Manifest, Training, write_manifest
from .policy import DEFAULT_MAX_MERGE_ROWS, DEFAULT_MERGE_FACTOR
from .snapshot import load_newest, manifest_generations
from .training import AUTO_TRAIN_SIZE, auto_placeholder, check_model, default_train_size, min_train_rows

__all__ = ["create_collection", "open_collection"]


# ==================================================================================================================
# opening and creating


def _folder_path(path):
    return os.path.abspath(_as_str(path, "path"))


def open_collection(path, mode="r", *, skip_damaged=False):
    """Open a collection folder.

    Parameters
    ----------
    path : str or os.PathLike
        The folder.
    mode : "r" or "a"
        "r": a read-only snapshot of the newest committed generation, kept until :meth:`Collection.refresh`; takes no
        lock. "a": the writer; takes the folder's lock (CollectionLockedError naming the folder and the lock when
        another writer holds it; PermissionError naming the folder and mode "r" when the folder is read-only).
    skip_damaged : bool, default False
        Mode "r" only. True: a segment file that is missing or fails its checks at open (or whose deletion file does)
        is left out, with a CollectionWarning; the others are searched, ``skipped`` names the files left out and
        ``info()["problems"]`` says why (``verify()`` fails). A damaged quantizer file cannot be skipped. False: such
        a segment is a FormatError naming its file (and this option). A writer sees every segment: its commits would
        otherwise drop the rows of those it skipped.

    The newest generation whose manifest verifies is opened; newer manifests that do not are skipped with a
    CollectionWarning and listed in ``info()["problems"]``. Raises FileNotFoundError (no such folder), ValueError
    (a file, not a folder) or FormatError (not a collection, or damaged).
    """
    folder = _folder_path(path)
    mode = check_choice(mode, "mode", ("r", "a"))
    skip_damaged = check_bool(skip_damaged, "skip_damaged")
    if skip_damaged and mode != "r":
        raise ValueError("skip_damaged=True opens a collection for reading only (mode='r'): a writer's commits would "
                         "drop the rows of the segments it skipped")
    if not os.path.exists(folder):
        raise FileNotFoundError(f"path: no such collection folder: {folder!r}")
    if not os.path.isdir(folder):
        raise ValueError(f"path: {folder!r} is a file, not a collection folder (an index file opens with "
                         "ockstore.open_index)")
    if not manifest_generations(folder):
        raise FormatError(f"{folder!r}: not a collection: no manifest file (manifest.<generation>) in the folder")
    lock = WriterLock(folder) if mode == "a" else None
    cache = {}
    try:
        snapshot = load_newest(folder, cache, skip_damaged=skip_damaged)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return Collection(folder, mode, snapshot, lock, cache, skip_damaged)


def create_collection(path, quantizer=None, *, metric=None, norm_encoding=None, store_vectors=None, metadata=None,
                      merge_factor=DEFAULT_MERGE_FACTOR, train_size=None):
    """Create an empty collection folder and return it open as the writer (mode "a").

    Parameters
    ----------
    path : str or os.PathLike
        A folder that does not exist yet (its parent must) or an empty one. FileExistsError when it is already a
        collection (or a file); ValueError when it holds other files.
    quantizer : PQ, CKM, ECKM, OCKM or IVF, fitted or not, or None
        None (the default): the library picks the model (``ockstore.default_quantizer``) when the collection trains,
        for the rows it holds then, and picks again at ``retrain()`` (flat while small, an inverted file as it grows;
        docs/ARCHITECTURE.md, "Defaults the library chooses").
        Fitted: saved in the folder (``quantizer.ockq``) and shared by every segment. With an IVF every segment is an
        inverted-file index (its coarse centroids shared too) and searches take ``n_probe``.
        Not fitted: the collection trains it itself (docs/ARCHITECTURE.md, "Collections for apps"). Until then its
        rows live as stored vectors only and searches are exact (brute force over them); the commit whose live rows
        reach ``train_size`` fits a copy of it on those rows (a sample of at most ``training.DEFAULT_SAMPLE_ROWS``)
        and encodes every row, in that one commit. The object given is not changed. ``retrain`` trains it again
        later (or earlier). The dimension of the vectors is set by the first add.
    metric : "l2", "ip", "cosine" or None
        With ``quantizer=None``: the metric of the model the library picks (None: "cosine", the metric of sentence
        embeddings). With a quantizer: its metric is the collection's (None, or that metric).
    norm_encoding : as for :class:`ockstore.IndexWriter`, for every segment.
    store_vectors : "float16", "float32", "uint8", "sq8" or None
        As for :class:`ockstore.IndexWriter`, for every segment. None: "float16" when the collection trains its
        quantizer (it keeps its rows as stored vectors until then, and re-ranks from them), no stored vectors with a
        fitted quantizer.
    metadata : dict or None
        User metadata, kept in every manifest (``Collection.metadata``).
    merge_factor : int >= 2
        F of the size-tiered merge policy (docs/ARCHITECTURE.md, "Collections"): a tier of segments of similar size
        is merged into one when it reaches F segments. Stored in the collection.
    train_size : int or None
        When the collection trains its quantizer: the number of live vectors whose commit trains it, at least what
        ``fit`` needs (K words per codebook, and n_lists for an IVF). None: ``training.default_train_size`` (for a
        model the library picks, ``training.AUTO_TRAIN_SIZE``), from the measurements in docs/results.md.
        ValueError with a fitted quantizer.
    """
    folder = _folder_path(path)
    auto = None
    if quantizer is None:
        metric = "cosine" if metric is None else PARAMETERS["metric"].check(metric)
        auto = AutoModel(metric)
        quantizer = auto_placeholder(AUTO_TRAIN_SIZE if train_size is None else 1, metric)
    else:
        quantizer = check_model(quantizer)
        if metric is not None and PARAMETERS["metric"].check(metric) != quantizer.metric:
            raise ValueError(f"metric: {metric!r}, the quantizer's is {quantizer.metric!r} (a collection's metric is "
                             "its quantizer's: leave metric out, or give a quantizer of that metric)")
    trained = quantizer.is_fitted
    if trained:
        quantizer = check_fitted_model(quantizer)
    elif store_vectors is None:
        store_vectors = "float16"  # the rows are stored vectors until training, and re-ranked from afterwards
    norm_encoding = resolve_norm_encoding(quantizer, norm_encoding)
    store_vectors = check_store_vectors(store_vectors, quantizer if trained else None)
    if store_vectors == "sq8" and not trained:
        raise ValueError("store_vectors='sq8' stores vectors through the value ranges a fitted quantizer learned; this "
                         "one is not fitted yet: fit it first (or give store_vectors='float16' and let the collection "
                         "train itself)")
    training = None
    if trained:
        if train_size is not None:
            raise ValueError("train_size applies to an unfitted quantizer, which the collection trains itself; this "
                             "one is fitted (leave train_size out)")
    else:
        least = min_train_rows(quantizer)
        if train_size is None:
            train_size = AUTO_TRAIN_SIZE if auto is not None else default_train_size(quantizer)
        else:
            train_size = check_int(train_size, "train_size", min_value=least, max_value=MAX_ID)
        if auto is not None:
            quantizer = auto_placeholder(train_size, auto.metric)
        training = Training.of(quantizer, train_size)
    user = check_user_metadata(metadata)
    merge_factor = check_int(merge_factor, "merge_factor", min_value=2, max_value=2**31 - 1)
    if os.path.exists(folder):
        if not os.path.isdir(folder):
            raise FileExistsError(f"path: {folder!r} exists and is a file, not a folder")
        entries = os.listdir(folder)
        if any(names.parse_manifest(name) is not None for name in entries):
            raise FileExistsError(f"path: {folder!r} is already a collection; open it with open_collection")
        others = [n for n in entries if n not in (names.LOCK_NAME, names.QUANTIZER_NAME) and not names.is_temporary(n)]
        if others:
            raise ValueError(f"path: {folder!r} is not empty (it holds {others[0]!r}): a collection needs a folder of "
                             "its own")
    else:
        parent = os.path.dirname(folder)
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"path: folder does not exist: {parent!r}")
        try:
            os.mkdir(folder)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise PermissionError(exc.errno, f"path: cannot create the collection folder {folder!r}: "
                                             f"{os.strerror(exc.errno)} (its parent folder is read-only for this "
                                             "process); create it in a folder you may write") from None
    try:
        lock = WriterLock(folder)
    except PermissionError as exc:  # an empty folder that exists, read-only: not a collection to open with mode "r"
        raise PermissionError(exc.errno, f"path: cannot create a collection in {folder!r}: {os.strerror(exc.errno)} "
                                         "(the folder is read-only for this process); create it in a folder you may "
                                         "write") from None
    cache = {}
    try:
        if trained:
            save_quantizer(os.path.join(folder, names.QUANTIZER_NAME), quantizer)
        write_manifest(folder, Manifest(0, names.QUANTIZER_NAME if trained else None, norm_encoding, store_vectors, 0,
                                        merge_factor, DEFAULT_MAX_MERGE_ROWS, (), "create", training, auto), user)
        snapshot = load_newest(folder, cache)
    except BaseException:
        lock.release()
        raise
    return Collection(folder, "a", snapshot, lock, cache)
