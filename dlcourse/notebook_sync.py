"""Writing the student notebooks into a folder a learner works in without ever overwriting
their edits: a manifest in the folder (``.dlcourse-manifest.json``) records what was generated;
a notebook the learner changed is kept and the new version is written beside it
(``NN_name.updated.ipynb``); a lesson the course renamed or split is retired unless the learner
changed it. Used by ``dlcourse start`` and ``dlcourse student-notebooks`` (``workspace.py``);
``student.py`` re-exports everything public here.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ._io import atomic_write
from .student_version import (SolutionMarkerError, make_student_notebook, nbformat_module,
                              notebook_text)

MANIFEST = ".dlcourse-manifest.json"

# Lessons that were renamed or split (issue 27): the old name -> the lessons that replace it. A
# learner's workspace may still hold the old one; :func:`sync_notebooks` says where it went.
RENAMED = {
    "04_mlp_on_digits": ("04a_mlp_on_digits", "04b_optimizers_and_regularization"),
    "04b_initialization": ("04c_initialization",),
    "08b_tiling_and_occupancy": ("08b_tiling_and_roofline",
                                 "08c_bank_conflicts_occupancy_and_tensor_cores"),
    "08c_fusion_and_graphs": ("08d_fusion_and_graphs",),
    "11_quantization_and_pruning": ("11a_quantization", "11b_pruning"),
    # issue 39: one sitting each, and the playground after the training lessons it plays with
    "02_loss_and_gradient_descent": ("02a_loss_and_softmax", "02b_gradient_descent"),
    "06_convolution": ("06a_convolution_and_im2col", "06b_pooling_and_convolution_backward"),
    "09_playground": ("04d_playground",),
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_manifest(outdir: Path) -> dict:
    try:
        data = json.loads((outdir / MANIFEST).read_text(encoding="utf-8"))
        return dict(data.get("generated", {}))
    except (FileNotFoundError, ValueError, AttributeError):
        return {}


def _file_sha(path: Path) -> str | None:
    try:
        return _sha(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _beside(outdir: Path, name: str, generated: dict) -> Path:
    """A free name beside ``name`` for the new version: ``NN_x.updated.ipynb`` (or ``-2``, ...),
    reusing one we wrote before if the learner has not changed it."""
    stem = name[:-len(".ipynb")]
    k = 1
    while True:
        candidate = outdir / (f"{stem}.updated.ipynb" if k == 1 else f"{stem}.updated-{k}.ipynb")
        sha = _file_sha(candidate)
        if sha is None or generated.get(candidate.name) == sha:
            return candidate
        k += 1


def sync_notebooks(source_dir, outdir) -> list[tuple[str, Path]]:
    """Write the student version of every notebook in ``source_dir`` into ``outdir`` without
    losing a learner's work; return ``[(what, path)]`` with ``what`` one of:

    - ``"added"``: a new lesson, written;
    - ``"updated"``: a newer version replaced one the learner had not changed;
    - ``"unchanged"``: already up to date;
    - ``"kept"``: the learner changed this notebook; it is kept as it is, and there is no new
      version of it;
    - ``"kept, new version beside"``: the learner changed it and the course has a newer version,
      written beside it (``path`` is the new file);
    - ``"retired"``: a lesson this folder got from an older version of the course that is no
      longer one (renamed or split, :data:`RENAMED`), untouched by the learner: removed;
    - ``"kept, retired"``: the same, but the learner changed it: kept as it is.

    What was generated is recorded (SHA-256) in ``outdir/.dlcourse-manifest.json``; a file
    the manifest does not know is the learner's. Every notebook is converted and validated
    before anything is written. Raises as :func:`write_student_notebooks` does.
    """
    nbformat = nbformat_module()
    source_dir, outdir = Path(source_dir), Path(outdir)
    if not source_dir.is_dir():
        raise FileNotFoundError(f"{source_dir} is not a folder: pass the folder of the course "
                                f"notebooks (notebooks/ in the repository).")
    paths = sorted(source_dir.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"{source_dir} holds no notebooks (*.ipynb): pass the folder "
                                f"of the course notebooks (notebooks/ in the repository).")
    if outdir.exists() and outdir.resolve() == source_dir.resolve():
        raise ValueError(f"The output folder {outdir} is the source folder: the student versions "
                         f"would overwrite the solutions. Choose another folder.")
    _check_outdir(outdir)
    converted = []
    for path in paths:
        student = _read_student_notebook(nbformat, path)
        try:
            nbformat.validate(student)
        except nbformat.ValidationError as err:
            raise ValueError(f"The student version of {path.name} is not a valid notebook: "
                             f"{err.message}") from err
        converted.append((path.name, student))
    outdir.mkdir(parents=True, exist_ok=True)
    generated = _read_manifest(outdir)
    done = []
    for name, student in converted:
        text = notebook_text(nbformat, student)
        target = outdir / name
        current = _file_sha(target)
        if current is None and not target.exists():
            what = "added"
        elif current == _sha(text):
            done.append(("unchanged", target))
            generated[name] = current
            continue
        elif current is not None and generated.get(name) == current:
            what = "updated"
        elif generated.get(f"source:{name}") == _sha(text):
            done.append(("kept", target))       # the learner's edits, and no newer version
            continue
        else:
            target, what = _beside(outdir, name, generated), "kept, new version beside"
        with atomic_write(target, "w", encoding="utf-8") as f:
            f.write(text)
        generated[target.name] = _sha(text)
        generated[f"source:{name}"] = _sha(text)
        done.append((what, target))
    done += _retire(outdir, generated, {name for name, _ in converted})
    with atomic_write(outdir / MANIFEST, "w", encoding="utf-8") as f:
        json.dump({"about": "what dlcourse generated here (SHA-256), so that it never "
                            "overwrites a notebook you changed",
                   "generated": dict(sorted(generated.items()))}, f, indent=1)
        f.write("\n")
    return done


def _check_outdir(outdir: Path) -> None:
    """Refuse an output folder that is a file, or lies inside one, naming that file."""
    for path in (outdir, *outdir.parents):
        if path.exists():
            if not path.is_dir():
                inside = "" if path == outdir else f" (it would be inside the file {path})"
                raise NotADirectoryError(f"The output folder {outdir} is not a folder{inside}: "
                                         f"the student notebooks go into a folder. Choose a "
                                         f"new or existing folder.")
            return


def _read_student_notebook(nbformat, path: Path):
    """The student version of the notebook at ``path``; a file that is not a notebook is
    refused by its path (nbformat's own errors do not name it)."""
    try:
        return make_student_notebook(nbformat.read(path, as_version=4), path.name)
    except SolutionMarkerError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as err:   # not JSON, not UTF-8,
        reason = " ".join(str(err).split())[:200] or type(err).__name__  # not a notebook
        raise ValueError(f"{path} is not a notebook that can be read ({type(err).__name__}: "
                         f"{reason}). Is it damaged or only partly saved? Restore it (git "
                         f"checkout, or a fresh copy of the course) or move it out of "
                         f"{path.parent}.") from err


def _retire(outdir: Path, generated: dict, lessons: set) -> list[tuple[str, Path]]:
    """Lessons written here by an older course that renamed or split them (:data:`RENAMED`): an
    untouched one goes (it holds nothing of the learner's), a changed one stays. Forgets both in
    ``generated``."""
    done = []
    for name in sorted(generated):
        if name in lessons or name.removesuffix(".ipynb") not in RENAMED:
            continue          # still a lesson; or not one the course renamed (only those go)
        target = outdir / name
        sha = _file_sha(target)
        if sha is not None and sha == generated[name]:
            target.unlink()
            done.append(("retired", target))
        elif sha is not None:
            done.append(("kept, retired", target))
        del generated[name]
        generated.pop(f"source:{name}", None)
    return done


def write_student_notebooks(source_dir, outdir) -> list[Path]:
    """Write the student version of every ``*.ipynb`` in ``source_dir`` (sorted) to ``outdir``,
    under the same names unless the learner changed the notebook there (then the new version
    goes beside it, see :func:`sync_notebooks`); return the paths written.

    Every notebook is converted and validated before any file is written, so an error leaves
    ``outdir`` as it was. Raises ``FileNotFoundError`` when ``source_dir`` holds no notebook,
    :class:`SolutionMarkerError` (naming the notebook and the cell) for an unbalanced solution
    block, and ``ValueError`` when ``outdir`` is ``source_dir`` (that would overwrite the
    solutions).
    """
    return [path for what, path in sync_notebooks(source_dir, outdir)
            if what not in ("unchanged", "kept")]
