"""Act on a StrategyPlan: configure devices in the only order TensorFlow accepts, then build the strategy."""

from __future__ import annotations

from typing import Any

from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.strategies.plan import LocalDevices, StrategyPlan

log = get_logger(__name__)
_WARNED: set[str] = set()  # each planning warning is shown once per process, not at every strategy()

_FIRST_THING = (
    "TensorFlow already ran an operation before the {what} was created. "
    "Hint: create the strategy first thing in the program (call tfdist.strategy() before building models, "
    "datasets or tensors)."
)


def discover_devices() -> LocalDevices:
    """List TensorFlow's physical GPUs and the CPU cores this process may use (does not start the runtime)."""
    import os

    import tensorflow as tf

    gpus = tuple(d.name for d in tf.config.list_physical_devices("GPU"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return LocalDevices(gpus=gpus, cpu_cores=cores)


def _configure_gpus(tf: Any, plan: StrategyPlan) -> None:
    physical = tf.config.list_physical_devices("GPU")
    if not physical:
        return
    chosen = [physical[i] for i in plan.gpu_indices]
    try:
        if len(chosen) != len(physical):
            tf.config.set_visible_devices(chosen, "GPU")
        for gpu in chosen:
            if plan.memory_limit_mb:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=plan.memory_limit_mb)]
                )
            elif plan.memory_growth:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as exc:
        raise ConfigError(_FIRST_THING.format(what="GPU configuration") + f" (TensorFlow: {exc})") from None


def _configure_cpu_replicas(tf: Any, count: int) -> None:
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return  # already configured this way, e.g. a second tfdist.strategy() call in one process
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError as exc:
        have = len(tf.config.list_logical_devices("CPU"))
        raise ConfigError(
            f"cannot split the CPU into {count} logical replicas: TensorFlow is already initialised with "
            f"{have}. Hint: create the strategy first thing in the program, or set TFDIST_CPU_REPLICAS "
            f"before starting it. (TensorFlow: {exc})"
        ) from None


def _resolver(tf: Any, plan: StrategyPlan) -> Any:
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(plan.cluster_spec),
        task_type=plan.task_type,
        task_id=plan.task_index,
        num_accelerators={"GPU": len(plan.gpu_indices)} if plan.gpu_indices else None,
        rpc_layer="grpc",
    )


def _multi_worker(tf: Any, plan: StrategyPlan) -> Any:
    experimental = tf.distribute.experimental
    implementation = getattr(experimental.CommunicationImplementation, plan.communication.upper())
    options = experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=plan.collective_timeout
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=_resolver(tf, plan), communication_options=options
        )
    except RuntimeError as exc:
        if "program startup" in str(exc) or "initialized" in str(exc):
            raise ConfigError(_FIRST_THING.format(what="multi-worker strategy")) from None
        raise


def _parameter_server(tf: Any, plan: StrategyPlan) -> Any:
    resolver = _resolver(tf, plan)
    if plan.task_type in ("worker", "ps"):
        # Workers and parameter servers only host variables and ops for the chief: serve until killed.
        log.info("serving as %s %d for the parameter-server chief", plan.task_type, plan.task_index)
        spec = resolver.cluster_spec()
        tf.distribute.Server(
            spec, job_name=plan.task_type, task_index=plan.task_index, protocol="grpc"
        ).join()
    return tf.distribute.ParameterServerStrategy(resolver)


def _tpu(tf: Any, plan: StrategyPlan) -> Any:  # pragma: no cover - no TPU hardware in the test suite
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=plan.tpu_name)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def build_strategy(plan: StrategyPlan) -> Any:
    """Configure devices (visibility, memory growth, logical CPUs) and return the tf.distribute strategy."""
    import tensorflow as tf

    for warning in plan.warnings:
        if warning not in _WARNED:
            _WARNED.add(warning)
            log.warning(warning)
    _configure_gpus(tf, plan)
    if plan.cpu_replicas > 1:
        _configure_cpu_replicas(tf, plan.cpu_replicas)
    if plan.kind == "multi_worker":
        return _multi_worker(tf, plan)
    if plan.kind == "parameter_server":
        return _parameter_server(tf, plan)
    if plan.kind == "tpu":
        return _tpu(tf, plan)
    if plan.kind == "mirrored":
        if plan.cpu_replicas > 1:
            devices = [f"/cpu:{i}" for i in range(plan.cpu_replicas)]
        else:
            devices = [f"/gpu:{i}" for i in range(len(plan.gpu_indices))]
        cross = tf.distribute.NcclAllReduce() if plan.communication == "nccl" else None
        if plan.communication == "ring":
            cross = tf.distribute.HierarchicalCopyAllReduce()
        return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross)
    device = "/gpu:0" if plan.gpu_indices else "/cpu:0"
    return tf.distribute.OneDeviceStrategy(device)
