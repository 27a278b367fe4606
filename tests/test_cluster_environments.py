"""Tests of the torchrun, mpirun and Slurm environments and the detection order.

The launchers' variables are patched into ``os.environ`` (``clear=True``); real
torchrun and mpirun jobs are in tests/cluster/.
"""

from __future__ import annotations

import os
import socket
from typing import Dict
from unittest import mock

import pytest

from ring_strategy.environments import (
    DETECTION_ORDER,
    ElasticEnvironment,
    LocalEnvironment,
    MpirunEnvironment,
    RingrunEnvironment,
    SlurmEnvironment,
    TorchrunEnvironment,
    detect_environment,
)
from ring_strategy.environments.external import PORT_BASE, PORT_SPAN
from ring_strategy.environments.slurm import expand_nodelist, expand_tasks_per_node

TORCHRUN = {
    "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2",
    "MASTER_ADDR": "localhost", "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "b970cd9b-8d37", "TORCHELASTIC_RESTART_COUNT": "0",
}
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_MCA_ess_base_jobid": "738721793", "PMIX_RANK": "1", "PMIX_NAMESPACE": "738721793",
    "OMPI_MCA_orte_precondition_transports": "30ec5edc0e9047c3-f7e6bf51db9c746b",
}
HYDRA = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"}
# What a process started by an Open MPI singleton (MPI initialised without
# mpirun, e.g. by Lightning's MPIEnvironment.detect()) inherits.
OPENMPI_SINGLETON = {"OMPI_MCA_ess": "singleton", "OMPI_MCA_orte_launch": "1", "PMIX_RANK": "0",
                     "PMIX_NAMESPACE": "2097741825", "OMPI_APP_CTX_NUM_PROCS": "1"}
SLURM = {
    "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2", "SLURM_NNODES": "4", "SLURM_STEP_NUM_NODES": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x4)", "SLURM_STEP_NODELIST": "gpu[07-09],gpu12",
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu09",
}


def _with(env: Dict[str, str], **changes: str) -> Dict[str, str]:
    return {**env, **changes}


# ---------------------------------------------------------------- torchrun
def test_torchrun_reads_its_variables():
    env = TorchrunEnvironment(TORCHRUN)
    assert (env.rank, env.size, env.local_rank, env.local_size, env.cross_rank, env.cross_size) == (
        1, 2, 1, 2, 0, 1)
    # One host: loopback only, one port above torchrun's own store.
    assert env.rendezvous_address == "127.0.0.1:29501"
    assert env.rendezvous_bind_address is None  # only rank 0 serves
    assert (env.bind_host, env.advertise_host) == ("127.0.0.1", "127.0.0.1")
    assert env.host_id == socket.gethostname()
    assert env.job_id.startswith("torchrun-") and len(env.secret) == 32 and env.secret_is_derived


def test_torchrun_rank0_serves_on_loopback():
    env = TorchrunEnvironment(_with(TORCHRUN, RANK="0", LOCAL_RANK="0"))
    assert env.rendezvous_bind_address == "127.0.0.1:29501"


def test_torchrun_ranks_agree_and_runs_differ():
    a = TorchrunEnvironment(TORCHRUN)
    b = TorchrunEnvironment(_with(TORCHRUN, RANK="0", LOCAL_RANK="0"))
    assert (a.job_id, a.secret, a.rendezvous_address) == (b.job_id, b.secret, b.rendezvous_address)
    other_run = TorchrunEnvironment(_with(TORCHRUN, TORCHELASTIC_RUN_ID="another"))
    restart = TorchrunEnvironment(_with(TORCHRUN, TORCHELASTIC_RESTART_COUNT="1"))
    assert len({a.job_id, other_run.job_id, restart.job_id}) == 3
    assert len({a.secret, other_run.secret, restart.secret}) == 3


def test_torchrun_on_several_hosts():
    env = TorchrunEnvironment(_with(TORCHRUN, RANK="5", WORLD_SIZE="8", LOCAL_RANK="1", GROUP_RANK="2",
                                    GROUP_WORLD_SIZE="4", MASTER_ADDR="node1", MASTER_PORT="65535"))
    assert (env.cross_rank, env.cross_size, env.local_size) == (2, 4, 2)
    assert env.rendezvous_address == "node1:65534"
    assert env.bind_host == "0.0.0.0"


def test_torchrun_without_group_variables_derives_hosts():
    plain = {k: v for k, v in TORCHRUN.items() if not k.startswith("GROUP_")}
    env = TorchrunEnvironment(_with(plain, RANK="5", WORLD_SIZE="8", LOCAL_RANK="1"))
    assert (env.cross_rank, env.cross_size) == (2, 4)


def test_torchrun_bad_values_are_quoted():
    with pytest.raises(ValueError, match="RANK should be an integer. Got: 'x'"):
        TorchrunEnvironment(_with(TORCHRUN, RANK="x"))
    with pytest.raises(ValueError, match="torchrun gave an invalid rank: 2 of 2"):
        TorchrunEnvironment(_with(TORCHRUN, RANK="2"))


# ---------------------------------------------------------------- overrides (every external launcher)
def test_explicit_secret_port_and_address():
    secret = "ab" * 32
    env = TorchrunEnvironment(_with(TORCHRUN, RING_SECRET=secret, RING_RENDEZVOUS_PORT="31000"))
    assert env.secret == bytes.fromhex(secret) and not env.secret_is_derived
    assert env.rendezvous_address == "127.0.0.1:31000"
    env = MpirunEnvironment(_with(OPENMPI, RING_RENDEZVOUS_ADDR="10.1.2.3:4000"))
    assert env.rendezvous_address == "10.1.2.3:4000"


@pytest.mark.parametrize("name, value, message", [
    ("RING_RENDEZVOUS_PORT", "70000", "RING_RENDEZVOUS_PORT should be a port number. Got: '70000'"),
    ("RING_RENDEZVOUS_ADDR", "nowhere", "RING_RENDEZVOUS_ADDR should look like 'host:port'. Got: 'nowhere'"),
    ("RING_SECRET", "not hex", "RING_SECRET should be a non-empty even number"),
])
def test_bad_overrides(name, value, message):
    with pytest.raises(ValueError, match=message):
        TorchrunEnvironment(_with(TORCHRUN, **{name: value}))


def test_rank0_refuses_a_rendezvous_host_that_is_not_its_own():
    env = MpirunEnvironment(_with(OPENMPI, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0",
                                  OMPI_COMM_WORLD_SIZE="4", RING_RENDEZVOUS_ADDR="192.0.2.77:4000",
                                  RING_SECRET="ab" * 16))
    with pytest.raises(ValueError, match="names another host than rank 0's"):
        env.rendezvous_bind_address


def test_multi_host_rank0_binds_every_interface_and_warns_about_the_secret():
    changes = dict(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_SIZE="4",
                   RING_RENDEZVOUS_ADDR=f"{socket.gethostname()}:4000")
    with pytest.warns(RuntimeWarning, match="RING_SECRET is not set"):
        env = MpirunEnvironment(_with(OPENMPI, **changes))
    assert env.rendezvous_bind_address == "0.0.0.0:4000"
    with mock.patch.dict(os.environ, {"RING_ADVERTISE_HOST": "10.9.8.7"}):
        assert env.advertise_host == "10.9.8.7"
    assert env.bind_host == "0.0.0.0"


# ---------------------------------------------------------------- mpirun
def test_openmpi_on_one_host():
    env = MpirunEnvironment(OPENMPI)
    assert (env.rank, env.size, env.local_rank, env.local_size, env.cross_rank, env.cross_size) == (
        1, 2, 1, 2, 0, 1)
    host, port = env.rendezvous_address.split(":")
    assert host == "127.0.0.1" and PORT_BASE <= int(port) < PORT_BASE + PORT_SPAN
    assert env.job_id.startswith("mpirun-")
    rank0 = MpirunEnvironment(_with(OPENMPI, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0"))
    assert (rank0.job_id, rank0.secret, rank0.rendezvous_address) == (env.job_id, env.secret, env.rendezvous_address)
    assert rank0.rendezvous_bind_address == env.rendezvous_address
    other = MpirunEnvironment(_with(OPENMPI, OMPI_MCA_orte_precondition_transports="0-1"))
    assert other.job_id != env.job_id and other.secret != env.secret


def test_hydra_variables():
    env = MpirunEnvironment(HYDRA)
    assert (env.rank, env.size, env.local_rank, env.local_size, env.cross_size) == (2, 4, 2, 4, 1)
    # Without job identifiers the launcher daemon's pid, shared by the host's ranks, names the job.
    assert env.job_id == MpirunEnvironment(_with(HYDRA, PMI_RANK="0", MPI_LOCALRANKID="0")).job_id


@pytest.mark.parametrize("rank, local_rank, cross_rank", [
    (5, 1, 1),  # by slot: hosts hold ranks 0-3 and 4-7
    (5, 2, 1),  # by node: ranks 1, 3, 5, 7 are on host 1
])
def test_openmpi_on_two_hosts(rank, local_rank, cross_rank):
    env = MpirunEnvironment(_with(OPENMPI, OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE="8",
                                  OMPI_COMM_WORLD_LOCAL_RANK=str(local_rank), OMPI_COMM_WORLD_LOCAL_SIZE="4",
                                  RING_RENDEZVOUS_ADDR="head:4000"))
    assert (env.cross_rank, env.cross_size) == (cross_rank, 2)


@pytest.mark.parametrize("changes, message", [
    ({"OMPI_COMM_WORLD_SIZE": "4"}, "export RING_RENDEZVOUS_ADDR=<rank 0's host>:<port>"),
    ({"OMPI_COMM_WORLD_SIZE": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "equally many processes on every host"),
    ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_RANK": "6",
      "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, "neither by slot nor by node"),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "abc"}, "OMPI_COMM_WORLD_LOCAL_RANK should be an integer. Got: 'abc'"),
])
def test_mpirun_errors(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        MpirunEnvironment(_with(OPENMPI, **changes))


def test_pmi_without_local_variables_is_an_error():
    with pytest.raises(ValueError, match="did not set the local rank and size"):
        MpirunEnvironment({"PMI_RANK": "0", "PMI_SIZE": "2"})


# ---------------------------------------------------------------- Slurm
@pytest.mark.parametrize("nodelist, hosts", [
    ("node01", ["node01"]),
    ("node[01-03,7]", ["node01", "node02", "node03", "node7"]),
    ("a1,b[2-3],c", ["a1", "b2", "b3", "c"]),
    ("gpu[1-2]-ib,x[09-10]", ["gpu1-ib", "gpu2-ib", "x09", "x10"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
])
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["node[01-03", "node[a-b]", "node[1-]"])
def test_expand_nodelist_rejects(bad):
    with pytest.raises(ValueError, match="SLURM_NODELIST"):
        expand_nodelist(bad)


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="Got: '2x3'"):
        expand_tasks_per_node("2x3")


def test_slurm_on_several_nodes():
    env = SlurmEnvironment(SLURM)
    assert (env.rank, env.size, env.local_rank, env.local_size, env.cross_rank, env.cross_size) == (
        5, 8, 1, 2, 2, 4)
    host, port = env.rendezvous_address.split(":")
    assert host == "gpu07" and PORT_BASE <= int(port) < PORT_BASE + PORT_SPAN
    assert env.host_id == "gpu09" and env.job_id.startswith("slurm-")
    next_step = SlurmEnvironment(_with(SLURM, SLURM_STEP_ID="1"))
    assert next_step.job_id != env.job_id and next_step.rendezvous_address != env.rendezvous_address


def test_slurm_on_one_node_uses_loopback():
    env = SlurmEnvironment(_with(SLURM, SLURM_PROCID="1", SLURM_STEP_NUM_TASKS="2", SLURM_NODEID="0",
                                 SLURM_STEP_NUM_NODES="1", SLURM_STEP_TASKS_PER_NODE="2",
                                 SLURM_STEP_NODELIST="gpu07"))
    assert env.rendezvous_address.startswith("127.0.0.1:") and env.bind_host == "127.0.0.1"
    assert (env.local_size, env.cross_size) == (2, 1)


def test_slurm_rendezvous_port_override():
    env = SlurmEnvironment(_with(SLURM, RING_RENDEZVOUS_PORT="23456"))
    assert env.rendezvous_address == "gpu07:23456"


# ---------------------------------------------------------------- detection
def test_detection_order():
    assert DETECTION_ORDER == [RingrunEnvironment, ElasticEnvironment, TorchrunEnvironment, MpirunEnvironment,
                               SlurmEnvironment, LocalEnvironment]


RINGRUN = {"RING_RANK": "0", "RING_SIZE": "1"}
SLURM_BATCH = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "4242", "SLURM_LOCALID": "0"}


@pytest.mark.parametrize("variables, expected", [
    ({}, LocalEnvironment),
    (RINGRUN, RingrunEnvironment),
    ({**TORCHRUN, **RINGRUN}, RingrunEnvironment),  # ringrun started under torchrun
    (TORCHRUN, TorchrunEnvironment),
    ({**SLURM, **TORCHRUN}, TorchrunEnvironment),  # srun starts torchrun on each node
    (OPENMPI, MpirunEnvironment),
    (HYDRA, MpirunEnvironment),
    ({**SLURM, **OPENMPI}, MpirunEnvironment),  # mpirun inside an allocation
    (SLURM, SlurmEnvironment),
    ({**SLURM, "PMI_RANK": "5", "PMI_SIZE": "8"}, SlurmEnvironment),  # srun --mpi=pmi2
    (SLURM_BATCH, LocalEnvironment),  # a program run directly by a batch script
    (OPENMPI_SINGLETON, LocalEnvironment),  # started by a process that initialised MPI alone
    ({**OPENMPI_SINGLETON, **RINGRUN}, RingrunEnvironment),
])
def test_detect(variables, expected):
    with mock.patch.dict(os.environ, variables, clear=True):
        assert type(detect_environment()) is expected
