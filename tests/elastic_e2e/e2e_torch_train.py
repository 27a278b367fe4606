"""An elastic PyTorch script written as users write one, for the elastic
end-to-end tests: ``python e2e_torch_train.py [TAG]`` under elastic ringrun.

``hvd.elastic.run`` drives the loop; the state is
``hvd.elastic.TorchState(model, optimizer, sampler=ElasticSampler(...),
epoch=0, batch=0, step=0)``; a ``DataLoader`` over the sampler gives each
rank ``GLOBAL_BATCH // size()`` samples a step, so step ``s`` trains on the
global batch ``s`` (a slice of the epoch's order) split ``rank::size``,
whatever the size: any run equals one process training on the global
batches (:func:`reference`) up to rounding. ``state.commit()`` every
``TRAIN_COMMIT`` steps. TAG is unused (tests pass one to find leftover
processes).

Settings (environment): ``TRAIN_EPOCHS`` (default 3), ``TRAIN_COMMIT``
(default 3), ``TRAIN_SLEEP`` (seconds per step, default 0.02),
``TRAIN_FAIL`` = ``WORKER:STEP:MODE`` (the worker numbered WORKER, at
global step STEP, ``sigkill``\\ s or ``stop``\\ s (SIGSTOP) itself, or
``raise``\\ s), ``TRAIN_PROGRESS``
(a file rank 0 rewrites after every step with ``STEP SIZE``),
``TRAIN_RECORD`` (``batch``, the default: ``sampler.record_batch``, every
rank's batch; ``indices``: ``sampler.record_indices`` of this rank's samples).

Lines (ringrun prefixes each with ``[worker number]``), those of
tests/elastic/elastic_train.py that tests/elastic/elastic_jobs.py reads
(``world ...``, ``synced ...`` at every entry of the training function,
``caught CLS at T`` when the loop restores the commit, ``first step world G
at T``, ``victim ...``, ``done ...``), and: ``trained world G epoch E step
S idx I,J,...`` (this rank's samples of step S), ``commit step S epoch E
at T`` (rank 0, before each commit), ``resets S,...`` and ``steps run N``
at the end.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

SAMPLES, DIM, GLOBAL_BATCH, SEED = 120, 8, 6, 7
LR, MOMENTUM = 0.05, 0.9
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH


def data() -> torch.utils.data.TensorDataset:
    """Sample index, features, target."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, DIM, generator=gen)
    y = torch.tanh(x @ torch.randn(DIM, 1, generator=gen)) + 0.1 * torch.randn(SAMPLES, 1, generator=gen)
    return torch.utils.data.TensorDataset(torch.arange(SAMPLES), x, y)


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(DIM, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def reference(epochs: int) -> torch.Tensor:
    """The parameters after ``epochs`` epochs of one process on the global
    batches (worker 0's initial parameters, the sampler's order)."""
    from ring_strategy.elastic import ElasticSampler

    dataset = data()
    model = make_model(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sampler = ElasticSampler(dataset, shuffle=True, seed=SEED, num_replicas=1, rank=0)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for start in range(0, len(order), GLOBAL_BATCH):
            _, x, y = dataset[order[start:start + GLOBAL_BATCH]]
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return flat(model)


def main() -> None:
    import ring_strategy.torch as hvd

    epochs = int(os.environ.get("TRAIN_EPOCHS", "3"))
    commit_every = int(os.environ.get("TRAIN_COMMIT", "3"))
    pause = float(os.environ.get("TRAIN_SLEEP", "0.02"))
    fail_worker, fail_step, fail_mode = (os.environ.get("TRAIN_FAIL", "") or "none:-1:none").split(":")
    progress = os.environ.get("TRAIN_PROGRESS", "")
    record_batch = os.environ.get("TRAIN_RECORD", "batch") == "batch"
    worker = os.environ.get("RING_ELASTIC_WORKER", os.environ.get("RING_RANK", "0"))
    torch.set_num_threads(1)

    hvd.init()
    dataset = data()
    model = make_model(1 + int(worker))  # replicas start apart: the first sync makes them rank 0's
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                         named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=SEED)
    counts = {"steps run": 0, "first": False}
    resets = []

    def world() -> int:
        from ring_strategy import basics

        return basics._env().world_generation or 0  # 0: not an elastic job

    class TracedState(hvd.elastic.TorchState):
        def restore(self) -> None:
            # Called by the loop while it handles the lost peer's error.
            print(f"caught {type(sys.exc_info()[1]).__name__} at {time.time():.3f}", flush=True)
            super().restore()

    def on_reset() -> None:
        resets.append(state.step)
        counts["first"] = True

    def fail_here(step: int) -> None:
        if fail_worker == worker and step == int(fail_step):
            print(f"victim worker {worker} pid {os.getpid()} failing at {time.time():.3f}", flush=True)
            if fail_mode in ("sigkill", "stop"):
                os.kill(os.getpid(), signal.SIGKILL if fail_mode == "sigkill" else signal.SIGSTOP)
            raise RuntimeError("the training script failed")

    def after_step(state, idx) -> None:
        counts["steps run"] += 1
        print(f"trained world {world()} epoch {state.epoch} step {state.step} "
              f"idx {','.join(str(int(i)) for i in idx)}", flush=True)
        if counts["first"]:
            print(f"first step world {world()} at {time.time():.3f}", flush=True)
            counts["first"] = False
        if progress and hvd.rank() == 0:
            with open(progress + ".tmp", "w") as f:
                f.write(f"{state.step + 1} {hvd.size()}\n")
            os.replace(progress + ".tmp", progress)
        time.sleep(pause)

    @hvd.elastic.run
    def train(state):
        print(f"world {world()} worker {worker} pid {os.getpid()} rank {hvd.rank()} size {hvd.size()} "
              f"at {time.time():.3f}", flush=True)
        print(f"synced world {world()} rank {hvd.rank()} step {state.step} "
              f"params {flat(state.model).numpy().tobytes().hex()}", flush=True)
        loader = torch.utils.data.DataLoader(dataset, batch_size=GLOBAL_BATCH // hvd.size(), sampler=state.sampler)
        while state.epoch < epochs:
            for i, (idx, x, y) in enumerate(loader):
                fail_here(state.step)
                state.optimizer.zero_grad()
                torch.nn.functional.mse_loss(state.model(x), y).backward()
                state.optimizer.step()
                after_step(state, idx)
                if record_batch:
                    state.sampler.record_batch(i, loader.batch_size)
                else:
                    state.sampler.record_indices(idx.tolist())
                state.batch += 1
                state.step += 1
                if state.step % commit_every == 0:
                    if hvd.rank() == 0:
                        print(f"commit step {state.step} epoch {state.epoch} at {time.time():.3f}", flush=True)
                    state.commit()
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)

    state = TracedState(model, optimizer, sampler=sampler, epoch=0, batch=0, step=0)
    state.register_reset_callbacks([on_reset])
    train(state)
    print(f"resets {','.join(map(str, resets))}", flush=True)
    print(f"steps run {counts['steps run']}", flush=True)
    print(f"done worker {worker} rank {hvd.rank()} steps {state.step} params {flat(model).numpy().tobytes().hex()}",
          flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
