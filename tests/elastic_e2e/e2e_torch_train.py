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

Settings and lines: e2e_worker.py's, and ``TRAIN_RECORD`` (``batch``, the
default: ``sampler.record_batch``, every rank's batch; ``indices``:
``sampler.record_indices`` of this rank's samples).
"""

from __future__ import annotations

import os
import sys

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


def powersgd(hvd) -> dict:
    """``TRAIN_POWERSGD=1``: the optimizer's compression is PowerSGD (rank 1, 4 warm-up steps, every matrix)."""
    if os.environ.get("TRAIN_POWERSGD") != "1":
        return {}
    return {"compression": hvd.PowerSGD(rank=1, warmup_steps=4, min_size=0)}


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(DIM, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def hex_of(model: torch.nn.Module) -> str:
    return flat(model).numpy().tobytes().hex()


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
    from tests.elastic_e2e.e2e_worker import Trace

    trace = Trace(hvd)
    record_batch = os.environ.get("TRAIN_RECORD", "batch") == "batch"
    torch.set_num_threads(1)

    hvd.init()
    dataset = data()
    model = make_model(1 + int(trace.worker))  # replicas start apart: the first sync makes them rank 0's
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                         named_parameters=model.named_parameters(),
                                         shard_optimizer_state=os.environ.get("TRAIN_SHARDED") == "1",
                                         **powersgd(hvd))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=SEED)

    class TracedState(hvd.elastic.TorchState):
        def restore(self) -> None:
            # Called by the loop while it handles the lost peer's error.
            trace.caught(sys.exc_info()[1])
            super().restore()

    @hvd.elastic.run
    def train(state):
        trace.entered(state.step, hex_of(state.model))
        loader = torch.utils.data.DataLoader(dataset, batch_size=GLOBAL_BATCH // hvd.size(), sampler=state.sampler)
        while state.epoch < trace.epochs:
            for i, (idx, x, y) in enumerate(loader):
                trace.fail_here(state.step)
                state.optimizer.zero_grad()
                torch.nn.functional.mse_loss(state.model(x), y).backward()
                state.optimizer.step()
                trace.trained(state.epoch, state.step, idx)
                if record_batch:
                    state.sampler.record_batch(i, loader.batch_size)
                else:
                    state.sampler.record_indices(idx.tolist())
                state.batch += 1
                state.step += 1
                if state.step % trace.commit_every == 0:
                    trace.commit(state.step, state.epoch)
                    state.commit()
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)

    state = TracedState(model, optimizer, sampler=sampler, epoch=0, batch=0, step=0)
    state.register_reset_callbacks([lambda: trace.reset(state.step)])
    train(state)
    trace.finished(state.step, hex_of(model))
    hvd.shutdown()


if __name__ == "__main__":
    main()
