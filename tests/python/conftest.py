"""Fixtures for hvactor.torch's tests. They run under hvactor-run: every
rank runs the same tests in the same order, so each test's collectives
pair up across ranks (tests/python/CMakeLists.txt)."""

import os
import tempfile

import pytest
import torch

import hvactor.torch as hvd


def pytest_configure(config):
    # Each rank its own temporary directories (pytest's default is shared
    # by every process of the user).
    if config.option.basetemp is None:
        config.option.basetemp = os.path.join(tempfile.gettempdir(),
                                              f"hvactor-pytest-{os.getpid()}")
    torch.set_num_threads(1)
    hvd.init()


@pytest.fixture
def world():
    """(rank, size) of the job."""
    return hvd.rank(), hvd.size()


def under_launcher():
    return "HOROVOD_RANK" in os.environ
