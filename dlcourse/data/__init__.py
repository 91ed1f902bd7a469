"""Data: toy sets, real data sets, and the few tools that feed them to a model.

Notebook ``01_perceptron`` uses the synthetic 2-D sets (:func:`make_blobs`,
:func:`make_xor`, :func:`make_circles`, :func:`make_spirals`). Notebook
``04a_mlp_on_digits`` introduces :func:`load_digits`, :class:`Standardizer`,
:func:`one_hot` and :func:`batches`. :func:`load_mnist1d` generates the harder MNIST-1D
set from code. The larger image sets (:func:`load_mnist`, :func:`load_fashion_mnist`,
:func:`load_cifar10`) are downloaded once into a cache folder and read with small parsers
written here (:func:`read_idx`, :func:`read_cifar10_bin`) -- no pickle, no framework.
Notebook ``15_attention`` adds :func:`load_text`: the Python documentation as characters.

One module per concern, all re-exported here (``dl.data.load_digits`` and so on):

===========================  =========================================================
``data/synthetic.py``        the 2-D point sets (``make_blobs`` ... ``POINT_SETS``)
``data/splits.py``           ``Dataset`` and the seeded train / val / test split
``data/datasets.py``         digits, MNIST-1D, MNIST, Fashion-MNIST, CIFAR-10 loaders
``data/formats.py``          the IDX and CIFAR-10 binary readers
``data/download.py``         ``download`` and ``data_dir``: verified, atomic, cached
``data/text.py``             ``load_text`` (characters, offline), windows, baselines
``data/batching.py``         ``Standardizer``, ``one_hot``, ``batches``
``data/bpe.py``              ``BPETokenizer``: byte-level BPE, trained from scratch
===========================  =========================================================

Conventions, everywhere in this package:

* images are ``float32`` in ``[0, 1]``, laid out ``(N, C, H, W)``; flat features are
  ``(N, D)``;
* labels are ``int64`` class indices, shape ``(N,)``;
* every split is fixed and seeded, so a number in a notebook can be reproduced;
* everything here runs on NumPy (the CPU). The GPU enters in one place only:
  ``batches(..., device="gpu")`` copies each batch there.
"""
from __future__ import annotations

from .batching import Standardizer, batches, one_hot
from .bpe import BPETokenizer
from .datasets import (CIFAR10_CLASSES, CIFAR10_FILE, DIGITS_CLASSES, DIGITS_SIZES,
                       FASHION_MNIST_CLASSES, FASHION_MNIST_FILES, MNIST1D_LENGTH, MNIST1D_SIZES,
                       MNIST_CLASSES, MNIST_FILES, load_cifar10, load_digits, load_fashion_mnist,
                       load_mnist, load_mnist1d)
from .download import ChecksumError, DownloadError, data_dir, download
from .formats import CIFAR10_RECORD, DataFormatError, read_cifar10_bin, read_idx
from .splits import SPLIT_SEED, Dataset
from .synthetic import POINT_SETS, make_blobs, make_circles, make_spirals, make_xor
from .text import (TEXT_VAL_FRACTION, Characters, TextData, char_baselines, load_text,
                   text_windows)

__all__ = [
    "Dataset", "DataFormatError", "DownloadError", "ChecksumError",
    "load_digits", "make_blobs", "make_xor", "make_circles", "make_spirals", "POINT_SETS",
    "load_mnist1d", "load_mnist", "load_fashion_mnist", "load_cifar10",
    "read_idx", "read_cifar10_bin", "download", "data_dir",
    "Standardizer", "one_hot", "batches",
    "SPLIT_SEED", "DIGITS_CLASSES", "MNIST_CLASSES", "FASHION_MNIST_CLASSES", "CIFAR10_CLASSES",
    "DIGITS_SIZES", "MNIST1D_SIZES", "MNIST1D_LENGTH", "MNIST_FILES", "FASHION_MNIST_FILES",
    "CIFAR10_FILE", "CIFAR10_RECORD",
    "load_text", "text_windows", "char_baselines", "Characters", "TextData", "TEXT_VAL_FRACTION",
    "BPETokenizer",
]
