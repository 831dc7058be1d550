"""XGBoost model files decoded and checked in Python before XGBoost parses them.

XGBoost's own reader trusts the file: a crafted JSON model (one ``parents`` entry of
``-1``) kills the process with SIGSEGV inside ``Booster.load_model``. So a registered
model file is decoded here (JSON, or XGBoost's UBJSON subset), every tree is checked
(:func:`check_xgboost_model`), and XGBoost is then given the checked document re-encoded
as JSON, never the original bytes: what XGBoost parses is exactly what was checked.

The UBJSON decoder is our own: it is the trust boundary, so it must never crash and must
bound every length by the bytes present; the one PyPI decoder (py-ubjson) is a C
extension last released in 2020. It reads what XGBoost writes (Draft 12: typed and
counted containers, big-endian numbers) and refuses anything else.
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from miret_governance.governance.ensembles.trees import MAX_CATEGORY_CODE, MalformedModelError, Tree

MAX_NESTING = 32
"""Deepest container nesting accepted (XGBoost writes 6 levels)."""
INT32_MAX = 2**31 - 1
ROOT_PARENT = (INT32_MAX, -1)
"""What XGBoost stores as the root's parent."""
_NUMBERS = {
    "i": ">i1",
    "U": ">u1",
    "I": ">i2",
    "l": ">i4",
    "L": ">i8",
    "d": ">f4",
    "D": ">f8",
}
_TREE_ARRAYS = (
    "left_children",
    "right_children",
    "parents",
    "split_indices",
    "split_conditions",
    "default_left",
    "base_weights",
    "loss_changes",
    "sum_hessian",
)


class _UbjsonReader:
    """A bounded, recursive UBJSON decoder over one bytes object."""

    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise MalformedModelError("the UBJSON document ends inside a value")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def marker(self) -> str:
        return chr(self.take(1)[0])

    def number(self, marker: str):
        dtype = np.dtype(_NUMBERS[marker])
        return np.frombuffer(self.take(dtype.itemsize), dtype=dtype)[0].item()

    def length(self) -> int:
        marker = self.marker()
        if marker not in "iUIlL":
            raise MalformedModelError(f"a UBJSON length has type {marker!r}, not an integer")
        size = self.number(marker)
        if size < 0 or size > len(self.data) - self.pos:
            raise MalformedModelError(f"a UBJSON length of {size} exceeds the file")
        return size

    def text(self) -> str:
        try:
            return str(self.take(self.length()), "utf-8")
        except UnicodeDecodeError:
            raise MalformedModelError("a UBJSON string is not UTF-8") from None

    def value(self, marker: str, depth: int):
        if marker in _NUMBERS:
            return self.number(marker)
        if marker in "SH":
            return self.text()
        if marker == "C":
            return chr(self.take(1)[0])
        if marker in "TFZ":
            return {"T": True, "F": False, "Z": None}[marker]
        if marker in "[{":
            if depth >= MAX_NESTING:
                raise MalformedModelError(f"UBJSON containers nest deeper than {MAX_NESTING}")
            return self.container(marker, depth + 1)
        raise MalformedModelError(f"unknown UBJSON type marker {marker!r}")

    def container(self, opening: str, depth: int):
        closing = "]" if opening == "[" else "}"
        element_type = count = None
        marker = self.marker()
        if marker == "$":
            element_type = self.marker()
            if self.marker() != "#":
                raise MalformedModelError("a typed UBJSON container has no count")
            count = self.length()
        elif marker == "#":
            count = self.length()
        else:
            self.pos -= 1  # no header: that was the first item or the closing marker
        if opening == "[" and element_type in _NUMBERS:
            dtype = np.dtype(_NUMBERS[element_type])
            return np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).tolist()
        items = [] if opening == "[" else {}
        while count is None or len(items) < count:
            if count is None and self.pos < len(self.data) and chr(self.data[self.pos]) == closing:
                self.pos += 1
                return items
            key = self.text() if opening == "{" else None
            item = self.value(element_type or self.marker(), depth)
            if opening == "[":
                items.append(item)
            else:
                items[key] = item
        return items


def decode_model_file(data: bytes) -> dict:
    """The document of an XGBoost model file, JSON or UBJSON.

    Raises
    ------
    MalformedModelError
        Not a JSON or UBJSON object, or a truncated or inconsistent one.
    """
    if data[:1] != b"{":
        raise MalformedModelError("an XGBoost model file starts with '{' (JSON or UBJSON)")
    if data[1:2] in (b'"', b" ", b"\t", b"\r", b"\n", b"}"):
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise MalformedModelError(f"the JSON model does not parse ({exc})") from None
    else:
        reader = _UbjsonReader(data)
        reader.take(1)
        document = reader.container("{", 1)
        if reader.pos != len(data):
            raise MalformedModelError("bytes follow the UBJSON model document")
    if not isinstance(document, dict):
        raise MalformedModelError("the model file is not a JSON object")
    return document


def _int(value, what: str, low: int = 0, high: int = INT32_MAX) -> int:
    try:
        number = int(str(value).strip("[]"))
    except ValueError:
        raise MalformedModelError(f"{what} is {value!r}, not an integer") from None
    if not low <= number <= high:
        raise MalformedModelError(f"{what} is {number}, outside [{low}, {high}]")
    return number


def _array(tree: dict, key: str, n_nodes: int, number: int) -> np.ndarray:
    values = tree.get(key)
    if not isinstance(values, list) or len(values) != n_nodes:
        raise MalformedModelError(
            f"tree {number} has {len(values) if isinstance(values, list) else 'no'} "
            f"{key} for its {n_nodes} nodes"
        )
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise MalformedModelError(f"tree {number} has {key} that are not numbers") from None
    if array.shape != (n_nodes,) or not np.isfinite(array).all():
        raise MalformedModelError(f"tree {number} has {key} that are not finite numbers")
    return array


def _check_tree(tree, number: int, n_features: int) -> None:
    if not isinstance(tree, dict) or not isinstance(tree.get("tree_param"), dict):
        raise MalformedModelError(f"tree {number} has no tree_param")
    param = tree["tree_param"]
    n_nodes = _int(param.get("num_nodes"), f"tree {number}'s num_nodes", 1)
    if _int(param.get("num_deleted", 0), f"tree {number}'s num_deleted") != 0:
        raise MalformedModelError(f"tree {number} has deleted nodes (num_deleted)")
    _int(param.get("size_leaf_vector", 1), f"tree {number}'s size_leaf_vector", 0, 1)
    arrays = {key: _array(tree, key, n_nodes, number) for key in _TREE_ARRAYS}
    index_arrays = ("left_children", "right_children", "parents", "split_indices")
    for key in index_arrays:
        values = arrays[key]
        if np.any(values != np.round(values)) or np.any(np.abs(values) > INT32_MAX):
            raise MalformedModelError(f"tree {number} has {key} that are not int32 indices")
    left = arrays["left_children"].astype(np.int64)
    right = arrays["right_children"].astype(np.int64)
    leaf = left == -1
    features = arrays["split_indices"].astype(np.int64)
    if np.any(features < 0) or np.any(features[~leaf] >= n_features):
        raise MalformedModelError(
            f"tree {number} splits on a feature index outside 0..{n_features - 1}"
        )
    if not np.isin(arrays["default_left"], (0, 1)).all():
        raise MalformedModelError(f"tree {number} has default_left values other than 0/1")
    _check_categories(tree, n_nodes, number)
    # the structure: Tree refuses children out of range, cycles and unreachable nodes
    Tree(
        feature=np.where(leaf, -1, features),
        threshold=np.where(leaf, np.nan, arrays["split_conditions"]),
        left=left,
        right=np.where(leaf, -1, right),
        value=arrays["split_conditions"],
    )
    parents = arrays["parents"].astype(np.int64)
    if parents[0] not in ROOT_PARENT:
        raise MalformedModelError(f"tree {number}'s root names a parent ({parents[0]})")
    split = np.flatnonzero(~leaf)
    if np.any(parents[left[split]] != split) or np.any(parents[right[split]] != split):
        raise MalformedModelError(f"tree {number}'s parents disagree with its children")


def _int_list(values, what: str, low: int = 0, high: int = INT32_MAX) -> list:
    if not isinstance(values, list):
        raise MalformedModelError(f"{what} is not a list")
    return [_int(v, what, low, high) for v in values]


def _check_categories(tree: dict, n_nodes: int, number: int) -> None:
    """Split types 0 (numeric) or 1 (categorical); each categorical node's segment of
    ``categories`` inside the list, its codes 0 to MAX_CATEGORY_CODE."""
    what = f"tree {number}"
    split_type = _int_list(tree.get("split_type", [0] * n_nodes), f"{what}'s split_type", 0, 1)
    if len(split_type) != n_nodes:
        raise MalformedModelError(f"{what} has {len(split_type)} split types for {n_nodes} nodes")
    listed = _int_list(tree.get("categories", []), f"{what}'s categories", 0, MAX_CATEGORY_CODE)
    nodes, starts, sizes = (
        _int_list(tree.get(key, []), f"{what}'s {key}")
        for key in ("categories_nodes", "categories_segments", "categories_sizes")
    )
    if nodes != [i for i, kind in enumerate(split_type) if kind] or not (
        len(starts) == len(sizes) == len(nodes)
    ):
        raise MalformedModelError(f"{what}'s categories_nodes disagree with its split types")
    if any(size < 1 or start + size > len(listed) for start, size in zip(starts, sizes)):
        raise MalformedModelError(f"{what} has a category segment outside its categories")


def _check_cats(cats, n_features: int) -> None:
    """XGBoost's training categories (``cats``): per feature UTF-8 bytes cut by offsets,
    or numbers; ``feature_segments`` and ``sorted_idx`` consistent with them."""
    if not isinstance(cats, dict):
        raise MalformedModelError("cats is not an object")
    encodings = cats.get("enc", [])
    if not isinstance(encodings, list) or len(encodings) not in (0, n_features):
        raise MalformedModelError("cats does not list one encoding per feature")
    counts = []
    for encoding in encodings:
        if not isinstance(encoding, dict):
            raise MalformedModelError("a cats encoding is not an object")
        values = encoding.get("values", [])
        if "offsets" in encoding:
            data = _int_list(values, "cats values", 0, 255)
            offsets = _int_list(encoding["offsets"], "cats offsets", 0, len(data))
            if (
                offsets
                and (offsets[0] != 0 or offsets[-1] != len(data))
                or offsets != sorted(offsets)
            ):
                raise MalformedModelError("cats offsets do not cut their bytes")
            counts.append(max(len(offsets) - 1, 0))
        else:
            if not isinstance(values, list) or not all(
                isinstance(v, (int, float)) and np.isfinite(v) for v in values
            ):
                raise MalformedModelError("cats values are not finite numbers")
            counts.append(len(values))
    bounds = _int_list(cats.get("feature_segments", []), "cats feature_segments")
    order = _int_list(cats.get("sorted_idx", []), "cats sorted_idx")
    if encodings and bounds != [0, *np.cumsum(counts).tolist()]:
        raise MalformedModelError("cats feature_segments disagree with its categories")
    if len(order) != sum(counts) or any(
        sorted(order[a:b]) != list(range(b - a)) for a, b in itertools.pairwise(bounds)
    ):
        raise MalformedModelError("cats sorted_idx is not an order of each feature's categories")


def check_xgboost_model(document: dict) -> None:
    """Check an XGBoost ``gbtree`` model document before XGBoost reads it.

    Every tree's arrays have one finite entry per node, children and parents agree and
    form one tree, split features lie in ``0 .. num_feature - 1``, categorical splits'
    category segments lie inside their lists, the training categories (``cats``) are
    consistent, and the forest's counts (``num_trees``, ``tree_info``,
    ``iteration_indptr``) match its trees.

    Raises
    ------
    MalformedModelError
    """
    try:
        learner = document["learner"]
        param = learner["learner_model_param"]
        booster = learner["gradient_booster"]
        model = booster["model"] if booster.get("name") == "gbtree" else None
    except (KeyError, TypeError):
        raise MalformedModelError("the XGBoost document has no learner / gradient_booster")
    if model is None:
        return  # gblinear, dart, ...: refused by name when read, never routed here
    n_features = _int(param.get("num_feature"), "num_feature", 1)
    n_classes = _int(param.get("num_class", 0), "num_class")
    # one base score, or (XGBoost >= 3) one per class of a softmax model
    try:
        scores = [float(v) for v in str(param.get("base_score", "0.5")).strip("[]").split(",")]
    except ValueError:
        raise MalformedModelError(f"base_score is {param.get('base_score')!r}") from None
    if not np.isfinite(scores).all() or len(scores) not in (1, max(n_classes, 1)):
        raise MalformedModelError(
            f"base_score has {len(scores)} values for {n_classes} classes, or one not finite"
        )
    trees = model.get("trees") if isinstance(model, dict) else None
    if not isinstance(trees, list):
        raise MalformedModelError("the XGBoost model has no list of trees")
    counts = model.get("gbtree_model_param", {})
    if _int(counts.get("num_trees"), "num_trees") != len(trees):
        raise MalformedModelError(f"num_trees says {counts.get('num_trees')}, found {len(trees)}")
    tree_info = model.get("tree_info", [])
    if len(tree_info) != len(trees) or any(
        _int(group, "tree_info", 0, max(n_classes - 1, 0)) < 0 for group in tree_info
    ):
        raise MalformedModelError("tree_info does not give one class group per tree")
    indptr = model.get("iteration_indptr")
    if indptr is not None:
        bounds = [_int(i, "iteration_indptr", 0, len(trees)) for i in indptr]
        if not bounds or bounds[0] != 0 or bounds[-1] != len(trees) or bounds != sorted(bounds):
            raise MalformedModelError("iteration_indptr does not partition the trees")
    if "cats" in model:
        _check_cats(model["cats"], n_features)
    for number, tree in enumerate(trees):
        _check_tree(tree, number, n_features)
        if _int(tree.get("id"), f"tree {number}'s id") != number:
            raise MalformedModelError(f"tree {number} carries id {tree.get('id')!r}")


def checked_model_json(data: bytes) -> bytes:
    """The model file decoded, checked and re-encoded as JSON for XGBoost to read."""
    document = decode_model_file(data)
    check_xgboost_model(document)
    return json.dumps(document, allow_nan=False).encode()
