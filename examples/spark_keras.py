"""Keras 3 on Spark: each rank is a Spark task, ``keras_callbacks.DistributedOptimizer`` in it.

The driver makes a Spark DataFrame (a synthetic regression task: features
``x0..x15``, label ``y``), writes it as one part per rank
(``examples/spark_data.py``) and runs :func:`train` on ``--num-proc`` Spark
tasks with ``ring_strategy.spark.run``. Each rank reads its own partition and
fits the same small model with ``hvd.DistributedOptimizer`` and the usual
callbacks; the driver prints each epoch's loss (averaged over the ranks) and
checks that the replicas agree. ``--backend`` picks the Keras backend of the
ranks (they get ``KERAS_BACKEND`` through ``run(env=...)``).

On this machine (Spark ``local[N]``, the data in a temporary directory)::

    python examples/spark_keras.py --num-proc 2 --backend torch

On a cluster, with a directory every executor can read::

    python examples/spark_keras.py --master spark://host:7077 --num-proc 4 --data-dir /shared/ring-data
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

import pyspark

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_data  # noqa: E402

pyspark.cloudpickle.register_pickle_by_value(spark_data)  # the executors need not have it


def train(data_dir: str, epochs: int, batch_size: int, lr: float) -> Dict[str, Any]:
    """One rank: runs in a process its Spark task started (Keras is imported there)."""
    import keras

    import keras_callbacks as hvd

    hvd.init()
    x, y = spark_data.read_part(data_dir, hvd.rank(), hvd.size())
    n = spark_data.common_length(len(x))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(32, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr * hvd.size())), loss="mse")
    history = model.fit(x[:n], y[:n], batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0,
                        callbacks=[hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback()])
    return {"rank": hvd.rank(), "rows": n, "losses": [float(v) for v in history.history["loss"]],
            "digest": spark_data.parameters_digest(model.get_weights())}


def main() -> None:
    parser = spark_data.parser(__doc__.splitlines()[0], lr=0.02)
    parser.add_argument("--backend", default=None, help="the ranks' KERAS_BACKEND (default: Keras's own choice)")
    args = parser.parse_args()
    results = spark_data.run_on_spark(args, train, env={"KERAS_BACKEND": args.backend} if args.backend else None)
    for epoch, loss in enumerate(results[0]["losses"]):
        print(f"epoch {epoch}: mean loss {loss:.4f}", flush=True)
    same = len({r["digest"] for r in results}) == 1
    print(f"parameters identical on all {len(results)} ranks: {same}", flush=True)


if __name__ == "__main__":
    main()
