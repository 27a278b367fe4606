"""A small elastic PyTorch training script, and the same script without
elastic, for tests/elastic_state/test_elastic_torch.py.

Each rank trains an MLP with momentum SGD and a DistributedOptimizer on
its share (``ElasticSampler``: rank::size of the epoch's order) of a
synthetic data set, ``--batch`` samples a step, for ``--epochs`` epochs;
the elastic version commits every ``--commit-every`` steps.

The test drives the elastic loop's two exits from here (each at most once):

- ``--host-update STEP:SKIP``: rank 0 only replaces
  ``ring_strategy.elastic._world.host_updates`` so that the commit after
  step STEP reports hosts changed with ``skip_sync`` SKIP (0 or 1); the
  other ranks still read the real one.
- ``--raise STEP:KIND0,KIND1,...``: in the first try of the step after
  STEP steps, rank r raises KIND r: ``internal`` (``HorovodInternalError``, after the backward
  pass: gradient reductions in flight), ``hosts`` or ``hosts-skip``
  (``HostsUpdatedInterrupt(skip_sync)``, at the start of the step), or
  ``-`` (nothing).

Printed at the end by every rank: ``<rank>: params <sha256>`` (the final
parameters' bytes), ``<rank>: steps run N`` (steps trained, redone ones
included), ``<rank>: syncs N``, ``<rank>: resets <steps at each reset>``,
``<rank>: seen ok`` (every sample of every epoch trained once by one rank,
after the last rollback); rank 0 also ``0: commits <step,step,...>``.
"""

import argparse
import hashlib

import torch

import ring_strategy.torch as hvd
from ring_strategy.elastic import _world

parser = argparse.ArgumentParser()
parser.add_argument("--elastic", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=48)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--commit-every", type=int, default=3)
parser.add_argument("--host-update", default="")
parser.add_argument("--raise", dest="raise_", default="")
args = parser.parse_args()

torch.set_num_threads(1)
hvd.init()
me = hvd.rank()

gen = torch.Generator().manual_seed(0)
X = torch.randn(args.samples, 8, generator=gen)
Y = torch.tanh(X @ torch.randn(8, 1, generator=gen)) + 0.1 * torch.randn(args.samples, 1, generator=gen)
torch.manual_seed(1 + me)  # replicas start apart: the first sync (or broadcast) makes them rank 0's
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(args.samples)), shuffle=True, seed=7)

steps_run = 0
commits = []
resets = []
syncs = 0
trained = {}  # (epoch, step) -> indices every rank trained at that step; redone steps overwrite
raised = set()


def train_step(epoch, step, indices):
    global steps_run
    kind = scheduled_raise(step)
    optimizer.zero_grad()
    if kind in ("hosts", "hosts-skip"):
        raise hvd.HostsUpdatedInterrupt(kind == "hosts-skip")
    loss = torch.nn.functional.mse_loss(model(X[indices]), Y[indices])
    loss.backward()
    if kind == "internal":
        raise hvd.HorovodInternalError(f"test: rank {me} lost a peer at step {step}")
    optimizer.step()
    steps_run += 1
    everyone = hvd.allgather_object(list(indices), name="seen")
    trained[(epoch, step)] = sorted(i for part in everyone for i in part)


def scheduled_raise(step):
    """This rank's KIND of ``--raise`` on the first try of its step, else None
    (a rank that a peer's exit stops earlier in that step loses its own)."""
    if not args.raise_ or "raise" in raised:
        return None
    at, kinds = args.raise_.split(":")
    if int(at) != step:
        return None
    raised.add("raise")
    return kinds.split(",")[me]


def report_hosts_changed(step_to_report):
    """On rank 0: the real host_updates, except at the chosen commit."""
    real = _world.host_updates
    at, skip = (int(v) for v in args.host_update.split(":"))

    def host_updates():
        if step_to_report() == at and "host-update" not in raised:
            raised.add("host-update")
            return True, bool(skip)
        return real()

    _world.host_updates = host_updates


def epoch_batches(indices):
    return [indices[i:i + args.batch] for i in range(0, len(indices), args.batch)]


def plain():
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for indices in epoch_batches(list(sampler)):
            train_step(epoch, step, indices)
            step += 1


@hvd.elastic.run
def elastic_train(state):
    while state.epoch < args.epochs:
        for b, indices in enumerate(epoch_batches(list(state.sampler))):
            train_step(state.epoch, state.step, indices)
            state.step += 1
            state.sampler.record_batch(b, args.batch)
            if state.step % args.commit_every == 0:
                if me == 0:
                    commits.append(state.step)
                state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)


def counting(sync):
    def counted():
        global syncs
        syncs += 1
        sync()

    return counted


if args.elastic:
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
    state.sync = counting(state.sync)
    state.register_reset_callbacks([lambda: resets.append(state.step)])
    if args.host_update and me == 0:
        report_hosts_changed(lambda: state.step)
    elastic_train(state)
    total = state.step
else:
    plain()
    total = args.epochs * len(epoch_batches(list(range(args.samples // hvd.size()))))

for epoch in range(args.epochs):
    seen = sorted(i for (e, _), part in trained.items() if e == epoch for i in part)
    assert seen == list(range(args.samples)), f"epoch {epoch}: trained {seen}"
assert len(trained) == total, (sorted(trained), total)
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
print(f"{me}: params {hashlib.sha256(flat.numpy().tobytes()).hexdigest()}", flush=True)
print(f"{me}: steps run {steps_run}", flush=True)
print(f"{me}: steps {total}", flush=True)
print(f"{me}: syncs {syncs}", flush=True)
print(f"{me}: resets {','.join(map(str, resets))}", flush=True)
print(f"{me}: seen ok", flush=True)
if me == 0:
    print(f"0: commits {','.join(map(str, commits))}", flush=True)
hvd.shutdown()
