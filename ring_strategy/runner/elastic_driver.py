"""The elastic driver: ringrun's supervisor for a job whose workers come and go.

The driver owns the job's membership. It numbers the workers it starts in
launch order and forms worlds (generations) from them
(:mod:`ring_strategy.runner.membership`): the oldest worker is rank 0 and
survivors keep their order. Each world is published in the job's store,
where the workers' :class:`~ring_strategy.environments.ElasticEnvironment`
finds it; the workers re-form their engine in their own processes. A
worker runs here or, on another host, behind its own ssh session
(:mod:`ring_strategy.runner.elastic_workers`).

What changes the membership:

- a worker that exits with a non-zero code or a signal failed: its host is
  blacklisted (for good, or for ``--blacklist-cooldown-range``) and gets no
  new worker meanwhile; the others form a new world without it (with a new
  worker on a free slot of another host, if there is one: the job keeps
  ``-np`` workers, or ``--max-np`` once hosts were added);
- a worker that exits 0 has finished: the others go on without it, and no
  new worker is started from then on (the job is ending);
- discovery lists a host no longer (or with fewer slots): its (youngest)
  workers are asked to leave through the next world, and end with status 0;
  one that has not left within the start timeout of that world is terminated;
- discovery lists a new host, or more slots, or a blacklisted host's cooldown
  ends: new workers are started there, up to ``--max-np``;
- members of the current world ask for the next one (an elastic reset after
  an error such as a timeout, ``ask_for_next_world``): once every live member
  has asked, the same workers form a new world; a member that neither asks
  nor exits soon enough after the first request is taken for lost and
  killed, which makes it a failure: within :data:`RESET_GRACE_SECONDS` when
  its process is stopped (SIGSTOP), within the start timeout when it runs
  (it may be busy computing).

The job ends with 0 once every worker has exited and one of them finished.
It fails with a message when it has had fewer than ``--min-np`` workers for
``--elastic-timeout`` seconds, when forming another world would exceed
``--reset-limit`` (worlds formed after a worker finished do not count), or
when every worker has failed and every listed host is
blacklisted for good.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import signal
import time
from typing import Dict, List, Optional, Set

from ring_strategy import _contracts as names
from ring_strategy.runner import threads
from ring_strategy.runner.blacklist import Blacklist
from ring_strategy.runner.discovery import DiscoveryError
from ring_strategy.runner.elastic_args import ElasticSettings
from ring_strategy.runner.elastic_workers import (
    Group, spans_machines, start_worker, store_address, store_bind_host, world_shm_paths,
)
from ring_strategy.runner.hosts import HostSlots, is_this_host
from ring_strategy.runner.job import Job, JobPlan, LocalWorkers, describe, note_threads
from ring_strategy.runner.membership import World, form_world, publish_world
from ring_strategy.runner.output import log
from ring_strategy.runner.store import StoreClient
from ring_strategy.runner.worker_env import elastic_worker_environment

__all__ = ["RESET_GRACE_SECONDS", "ElasticJob"]

#: Seconds a stopped member of a world (SIGSTOP) is given to ask for the
#: next world, or to exit, once another member has asked; after that it is
#: taken for lost. A running member gets the start timeout.
RESET_GRACE_SECONDS = 5.0

# Workers wait this much longer for a world than the driver waits for
# --min-np workers, so that the driver's message comes first.
_WORKER_WAIT_MARGIN_SECONDS = 30.0


@dataclasses.dataclass
class _Worker:
    """One worker process the driver started."""

    number: int
    host: str
    group: Group
    returncode: Optional[int] = None
    leaving_since: Optional[float] = None  # when it was asked to leave
    stop_at: Optional[float] = None  # when to signal it next, once it overstays
    signalled: int = 0

    @property
    def alive(self) -> bool:
        return self.returncode is None

    @property
    def member(self) -> bool:
        """Alive and not asked to leave: part of the next world."""
        return self.alive and self.leaving_since is None


class ElasticJob(Job):
    """Runs an elastic job to its end (see the module's docstring).

    Args:
        plan: The command, timeouts and verbosity (no hosts: the driver places workers).
        settings: The elastic options.
    """

    def __init__(self, plan: JobPlan, settings: ElasticSettings) -> None:
        super().__init__(plan)
        self.settings = settings
        self.workers: Dict[int, _Worker] = {}
        self.world: Optional[World] = None
        self.hosts: List[HostSlots] = []
        self.blacklist = Blacklist(settings.cooldown)
        self.target = float(settings.np)  # workers to have: -np, then --max-np once hosts grow
        self.finishing = False
        self.short_since: Optional[float] = None
        self.resets = 0
        self._discovered = False
        self._client: Optional[StoreClient] = None
        self._port = 0
        self._spans = spans_machines(settings.discovery, plan.interface)
        self._said: Set[str] = set()
        self._reset_asked_at: Optional[float] = None  # when a member first asked to leave the current world

    def _describe(self) -> str:
        top = "every slot" if self.settings.max_np is None else f"{self.settings.max_np}"
        return f"elastic, {self.settings.np} workers to start, at least {self.settings.min_np}, at most {top}"

    def _store_bind_host(self) -> str:
        return store_bind_host(self.plan, self._spans)

    def _rendezvous_address(self, bound: str) -> str:
        self._port = int(bound.rpartition(":")[2])
        return store_address(self.plan, self._port)

    def _start_all(self, address: str) -> Optional[int]:
        self._client = StoreClient(address, self.secret, timeout=self.plan.start_timeout)
        return None

    def _supervise(self) -> int:
        try:
            return self._drive()
        finally:
            if self._client is not None:
                self._client.close()

    def _drive(self) -> int:
        next_discovery = 0.0
        while True:
            if time.monotonic() >= next_discovery:
                self._discover()
                next_discovery = time.monotonic() + self.settings.discovery_interval
            code = self._step(time.monotonic())
            if code is not None:
                if code != 0 and any(w.alive for w in self.workers.values()):
                    log("stopping the workers")
                    self._stop_workers()
                return code
            try:
                kind, a, b = self.events.get(timeout=max(0.01, min(0.5, next_discovery - time.monotonic())))
            except queue.Empty:
                continue
            if kind == "exit":
                self._on_exit(a, b)
            elif kind == "signal":
                log(f"received {signal.Signals(a).name}; terminating the workers")
                self._stop_workers()
                return 128 + a

    # -- one pass ----------------------------------------------------------------

    def _step(self, now: float) -> Optional[int]:
        """Starts, stops and re-forms what the current state asks for; an exit code ends the job."""
        self._stop_overstaying(now)
        alive = [w for w in self.workers.values() if w.alive]
        if not alive and self.finishing:
            if self.plan.verbose:
                log("every worker has exited and training finished")
            return 0
        code = self._launch()
        if code is not None:
            return code
        members = [w for w in self.workers.values() if w.member]
        if len(members) >= self.settings.min_np:
            self.short_since = None
            if self.world is None or tuple(sorted(w.number for w in members)) != self.world.workers:
                return self._publish(members)
            if self._resets_asked(now, members):
                return self._publish(members)
            return None
        return self._short_of_workers(now, members)

    def _short_of_workers(self, now: float, members: List[_Worker]) -> Optional[int]:
        """Fewer than --min-np workers: waits for slots, up to --elastic-timeout."""
        if not any(w.alive for w in self.workers.values()) and self.workers and self.settings.cooldown is None:
            if self.hosts and all(self.blacklist.blocked(h.hostname) for h in self.hosts):
                log(f"every host failed: {', '.join(self.blacklist.hosts())} blacklisted; the job failed")
                return 1
        if self.short_since is None:
            self.short_since = now
            if not self.finishing:  # the others are about to finish too
                log(f"{len(members)} worker(s), fewer than --min-np {self.settings.min_np}: waiting up to "
                    f"{self.settings.elastic_timeout:g} s (--elastic-timeout) for more slots")
        elif now - self.short_since >= self.settings.elastic_timeout:
            log(f"fewer than --min-np {self.settings.min_np} workers for {self.settings.elastic_timeout:g} s "
                f"(--elastic-timeout); the job failed")
            return 1
        return None

    def _resets_asked(self, now: float, members: List[_Worker]) -> bool:
        """Whether every member of the current world has asked for the next
        one; kills those that have not, once the others have waited long enough."""
        assert self.world is not None and self._client is not None
        g = self.world.generation
        asked = [w for w in members if self._client.try_get(names.elastic_key(self.job_id, "reset", g, w.number)) is not None]
        if not asked:
            return False
        if len(asked) == len(members):
            log(f"every member of world {g} asked for a new world (worker(s) "
                f"{', '.join(str(w.number) for w in asked)})")
            return True
        if self._reset_asked_at is None:
            self._reset_asked_at = now
        waited = now - self._reset_asked_at
        for w in members:
            # A stopped process will not come; a running one may be busy computing.
            grace = RESET_GRACE_SECONDS if _stopped(w) else self.plan.start_timeout
            if w not in asked and w.signalled == 0 and waited >= grace:
                log(f"{self._where(w)} did not leave world {g} within {grace:g} s of worker "
                    f"{asked[0].number}: taking it for lost")
                w.group.signal(signal.SIGKILL)
                w.signalled = 2
        return False

    def _publish(self, members: List[_Worker]) -> Optional[int]:
        """Forms and publishes the next world of ``members``; fails past --reset-limit."""
        previous = self.world
        limit = self.settings.reset_limit
        counts = previous is not None and not self.finishing  # leaving a finishing job is no reset
        if counts and limit is not None and self.resets >= limit:
            log(f"the job would reset again after {self.resets} reset(s), more than --reset-limit {limit}; "
                "the job failed")
            return 1
        generation = 1 if previous is None else previous.generation + 1
        if previous is not None:
            self._abandon(previous)
        leaving = [w for w in self.workers.values() if w.alive and w.leaving_since is not None]
        for w in leaving:  # told now: terminated if still there after the start timeout
            if w.stop_at is None:
                w.stop_at = time.monotonic() + self.plan.start_timeout
        world = form_world(generation, [(w.number, w.host) for w in members], previous, [w.number for w in leaving])
        assert self._client is not None
        publish_world(self._client, self.job_id, world)
        self.resets += counts
        self.world = world
        self._reset_asked_at = None
        for rank, number in enumerate(world.workers):
            group = self.workers[number].group
            if not isinstance(group, LocalWorkers):  # this machine's are removed at the job's end
                group.remove_at_exit(world_shm_paths(self.job_id, generation, rank))
        ranks = (f"rank {r} = worker {w} on {h}" for r, (w, h) in enumerate(world.members))
        log(f"world {generation}: " + ", ".join(ranks))
        return None

    def _abandon(self, world: World) -> None:
        """Writes the rendezvous keys of ``world`` that its ranks have not, so
        that none waits for them: a world given up on before it formed fails
        at once in every rank still joining it (``init()`` rejects the
        abandoned endpoint, or the ranks find a peer lost), and they join
        the next. A world that formed has every key already."""
        assert self._client is not None
        world_id = names.world_job_id(self.job_id, world.generation)
        for rank in range(len(world.members)):
            for part, value in (("endpoint", names.ABANDONED_ENDPOINT), ("connected", "1"), ("done", "1")):
                key = names.rendezvous_key(world_id, world.generation, part, rank)
                if self._client.try_get(key) is None:
                    self._client.set(key, value.encode())

    # -- workers -----------------------------------------------------------------

    def _launch(self) -> Optional[int]:
        """Starts workers on free slots while the job is below its target size."""
        if self.finishing:
            return None
        limit = self.target if self.settings.max_np is None else min(self.target, self.settings.max_np)
        count = sum(w.member for w in self.workers.values())
        for host in self.hosts:
            if self.blacklist.blocked(host.hostname):
                continue
            used = sum(w.alive and w.host.lower() == host.hostname.lower() for w in self.workers.values())
            for _ in range(host.slots - used):
                if count >= limit:
                    return None
                code = self._start_worker(host.hostname)
                if code is not None:
                    return code
                count += 1
        return None

    def _start_worker(self, host: str) -> Optional[int]:
        number = len(self.workers)
        here = is_this_host(host)
        env = elastic_worker_environment(
            os.environ if here else {}, worker=number, secret=self.secret, job_id=self.job_id,
            rendezvous_address=store_address(self.plan, self._port, None if here else host),
            # A new worker waits in its world's rendezvous until the others
            # reach their next check of host updates.
            start_timeout=max(self.plan.start_timeout, self.settings.elastic_timeout),
            elastic_timeout=self.settings.elastic_timeout + _WORKER_WAIT_MARGIN_SECONDS, hostname=host,
        )
        slots = max((h.slots for h in self.hosts if h.hostname.lower() == host.lower()), default=1)
        if here:  # its share of this host's CPUs among the host's slots (another host's bootstrap gives it there)
            env.update(threads.thread_variables(env, slots))
            note_threads(dict(os.environ), slots, self.plan.verbose)
        assert self.output is not None
        group, code = start_worker(self.plan, host, here, number, env, self.job_id, self.output, self.events, slots)
        self.groups.append(group)
        if code is not None:
            return code
        self.workers[number] = _Worker(number, host, group)
        if isinstance(group, LocalWorkers):
            log(f"started worker {number} on {host} (pid {group.procs[number].pid})")
        else:
            log(f"started worker {number} on {host} over ssh")
        return None

    def _where(self, w: _Worker) -> str:
        if self.world is not None and w.number in self.world.workers:
            return (f"worker {w.number} (rank {self.world.workers.index(w.number)} of world "
                    f"{self.world.generation}) on {w.host}")
        return f"worker {w.number} on {w.host}"

    def _on_exit(self, number: int, returncode: int) -> None:
        w = self.workers[number]
        w.returncode = returncode
        if w.leaving_since is not None:
            log(f"{self._where(w)} left the job ({describe(returncode)})")
        elif returncode == 0:
            if not self.finishing:
                log(f"{self._where(w)} finished; no new workers will be started")
            self.finishing = True
        else:
            seconds = self.blacklist.add(w.host)
            until = "for good" if math.isinf(seconds) else f"for {seconds:.1f} s"
            log(f"{self._where(w)} {describe(returncode)}; host {w.host} is blacklisted {until}")

    def _stop_overstaying(self, now: float) -> None:
        """Terminates workers asked to leave that have not (SIGTERM, then SIGKILL)."""
        for w in self.workers.values():
            if w.alive and w.stop_at is not None and now >= w.stop_at and w.signalled < 2:
                w.group.signal(signal.SIGTERM if w.signalled == 0 else signal.SIGKILL)
                w.signalled += 1
                w.stop_at = now + self.plan.grace

    # -- hosts -------------------------------------------------------------------

    def _say_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            log(message)

    def _discover(self) -> None:
        """Reads the hosts; asks workers on hosts no longer listed to leave; notes new slots."""
        try:
            listed = self.settings.discovery.discover()
        except DiscoveryError as e:
            self._say_once(f"host discovery: {e}; keeping the last hosts")
            return
        hosts = list(listed)
        slots = {h.hostname.lower(): h.slots for h in hosts}
        before = {h.hostname.lower(): h.slots for h in self.hosts}
        grew = any(n > before.get(name, 0) for name, n in slots.items())
        if (self.blacklist.expiring() or grew) and self._discovered:
            self.target = math.inf
        self._discovered = True
        self.hosts = hosts
        self._ask_to_leave(slots)

    def _ask_to_leave(self, slots: Dict[str, int]) -> None:
        """Workers beyond their host's listed slots (youngest first) leave through the next world."""
        now = time.monotonic()
        by_host: Dict[str, List[_Worker]] = {}
        for w in sorted(self.workers.values(), key=lambda w: w.number):
            if w.member:
                by_host.setdefault(w.host.lower(), []).append(w)
        for host, workers in by_host.items():
            for w in workers[slots.get(host, 0):]:
                log(f"{self._where(w)}: its host is no longer listed; asking it to leave")
                w.leaving_since = now


def _stopped(w: _Worker) -> bool:
    """Whether worker ``w`` runs here and is stopped (by a signal or a tracer);
    a worker on another host is never taken for stopped."""
    if not isinstance(w.group, LocalWorkers):
        return False
    try:
        with open(f"/proc/{w.group.procs[w.number].pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False
