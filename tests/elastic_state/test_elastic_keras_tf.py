"""The training-script side of elastic TensorFlow and Keras 3 on real
workers (``ringrun -np 2``, no elastic launcher: a reset re-forms the same
two ranks). workers/elastic_keras_train.py trains with and without elastic,
its TensorFlow loop then its Keras ``fit`` in the same processes; every
elastic run must end with the plain run's weights, bit for bit.

The Keras runs on the JAX and torch backends, and with ``fit`` numbering
its epochs from 0, are marked slow (``pytest -m slow``)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from tests.elastic_state.elastic_jobs import train

WORKER = Path(__file__).parent / "workers" / "elastic_keras_train.py"
FIELDS = ["tf weights", "tf steps run", "tf resets", "keras weights", "keras epoch", "keras resets"]
# Rank 0 alone hears of new hosts at the commit after batch 4 of epoch 1 (of 8 batches).
HOST_UPDATE = ["--host-update", "1:4"]


def _train(*options: str, backend: str = "tensorflow") -> Dict[str, Dict[int, str]]:
    env = {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    return train(WORKER, options, FIELDS, "done", same=["tf weights", "keras weights"], env=env)


@pytest.fixture(scope="module")
def reference() -> Dict[str, Dict[int, str]]:
    """The plain TensorFlow and Keras runs."""
    return _train()


@pytest.fixture(scope="module")
def elastic() -> Dict[str, Dict[int, str]]:
    """The elastic runs: every rank's TensorFlow step 7 raises
    HorovodInternalError inside a tf.function; Keras gets a host update."""
    return _train("--elastic", "--fail", "7", *HOST_UPDATE)


@pytest.mark.slow  # make test: tests/elastic_e2e (TensorFlow and Keras under elastic ringrun)
def test_tensorflow_state_rolls_back_a_lost_peer_inside_a_tf_function(reference, elastic):
    """TensorFlow hands the error over as its own UnknownError; the loop
    still restores the commit after step 6, redoes one step and ends at the
    plain run's weights."""
    assert elastic["tf resets"] == {0: "6", 1: "6"}
    assert elastic["tf steps run"] == {0: "17", 1: "17"}  # 16 steps, one redone
    assert elastic["tf weights"][0] == reference["tf weights"][0]


def _check_keras(found: Dict[str, Dict[int, str]], reference: str) -> None:
    """Every rank reset at epoch 1, batch 4 and resumed the epoch there; the
    epoch counter ends at 2 (Horovod #2844), the weights at the plain run's."""
    assert found["keras resets"] == {0: "1.4", 1: "1.4"}
    assert found["keras epoch"] == {0: "2", 1: "2"}
    assert found["keras weights"][0] == reference


@pytest.mark.slow
def test_keras_state_resumes_mid_epoch_after_a_host_update(reference, elastic):
    _check_keras(elastic, reference["keras weights"][0])


@pytest.mark.slow
def test_keras_state_with_fit_epochs_numbered_from_zero(reference):
    _check_keras(_train("--mode", "keras", "--elastic", "--relative-epochs", *HOST_UPDATE),
                 reference["keras weights"][0])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras_state_on_other_backends(backend):
    plain = _train("--mode", "keras", backend=backend)
    _check_keras(_train("--mode", "keras", "--elastic", *HOST_UPDATE, backend=backend), plain["keras weights"][0])
