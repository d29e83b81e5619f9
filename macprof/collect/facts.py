"""The facts recorded before measuring: the machine, its bandwidth, a model's files and shape.
They become the journal's run_start and model_start events."""

from __future__ import annotations

from macprof import __version__
from macprof.collect import machine, modelinfo, probes
from macprof.collect.system import utc_now
from macprof.config import settings_dict
from macprof.errors import MacprofError
from macprof.files import filekind
from macprof.files.fileid import cached_sha256
from macprof.model.chips import spec_bandwidth, spec_tflops
from macprof.model import events as ev
from macprof.model.definitions import SCHEMA_VERSION
from macprof.model.records import ABSENT
from macprof.model.log import (Bandwidth, Identity, InputFile, Machine, MeasuredBandwidth, ModelFile, ModelSettings,
                               Source, SpecBandwidth, SystemMemory)


def system_memory() -> SystemMemory:
    return SystemMemory(**machine.memory_snapshot())


# -- events written by the orchestrator ----------------------------------------------------
def run_start_event() -> ev.RunStart:

    mach = machine.collect_machine()
    return ev.RunStart(schema_version=SCHEMA_VERSION, tool_version=__version__, utc=utc_now(),
                       machine=Machine.from_json(mach), software=machine.collect_software(),
                       bandwidth=machine_bandwidth(mach), memory=system_memory())


def machine_bandwidth(mach: dict) -> Bandwidth:
    """Published (spec) and measured bandwidth for the ceiling, each with its source."""

    spec = spec_bandwidth(mach.get("chip"), mach.get("gpu_cores"))
    if mach.get("chip") is None:
        spec["reason"] = "not an Apple Silicon chip: no published unified-memory bandwidth"
    try:
        probe = probes.cached()
        flops = probe.get("flops") or {}
        measured = {"gbs": probe["median_gbs"], "best_gbs": probe["best_gbs"], "stdev_gbs": probe["stdev_gbs"],
                    "device": probe["device"], "method": probe["method"], "utc": probe["utc"],
                    "cached": probe["cached"], "reason": None,
                    "tflops": flops.get("median_tflops"), "tflops_method": flops.get("method") or flops.get("reason")}
    except Exception as exc:  # noqa: BLE001 - a failed probe leaves the measured ceiling unknown
        measured = {"gbs": None, "reason": f"bandwidth probe failed: {exc}"}
    return Bandwidth(spec=SpecBandwidth(**spec), measured=MeasuredBandwidth(**measured),
                     tflops=spec_tflops(mach.get("chip"), mach.get("gpu_cores")))


def model_files(model) -> list[dict]:
    """Name, size and sha256 of each of the model's files (checked again here: a file can have
    become a FIFO or a device since models.toml was read)."""
    return [{"name": str(f.relative_to(model.path)) if model.path.is_dir() else f.name,
             "bytes": f.stat().st_size, "sha256": cached_sha256(f)} for f in filekind.model_files(model.path)]


def file_unknown(model) -> bool:
    """A server whose model file is not named: no files to hash, now or on --resume."""
    endpoint = getattr(model, "endpoint", None)
    return endpoint is not None and endpoint.file is None


def model_start_event(model, files_error: str | None = None, inputs: list[dict] | None = None) -> ev.ModelStart:
    """A model's identity, shape and settings; ``inputs``: the files its phases read besides its
    own, with their sizes and sha256 (run/phases/api.py Parents.inputs; None: one could not be
    read, the phase that reads it records why)."""

    files: list[dict] = []
    endpoint = getattr(model, "endpoint", None)
    unknown_file = file_unknown(model)
    if not files_error and not unknown_file:
        try:
            files = model_files(model)
        except MacprofError as exc:
            files_error = str(exc)
    info, info_error = None, None
    source = getattr(model, "source", None)
    # a model named on the command line: where it came from (models.toml entries: absent)
    where = Source(ref=source.ref, store=source.store, path=str(model.path)) if source else ABSENT
    if unknown_file:
        info_error = "the server's model file is unknown (give `path` in models.toml): no shape, no ceiling"
    elif not files_error:
        try:
            info = modelinfo.inspect(model.path, model.settings.kv_type).to_dict()
        except MacprofError as exc:
            info_error = str(exc)
    return ev.ModelStart(
        model=model.name, utc=utc_now(),
        identity=Identity(
            name=model.name, engine=model.engine, path=endpoint.url if endpoint is not None else str(model.path),
            quant_label=model.quant, quant_declared=info["quant"] if info else None,
            architecture=info["architecture"] if info else None, n_params=info["n_params"] if info else None,
            total_bytes=sum(f["bytes"] for f in files), files=tuple(ModelFile(**f) for f in files), source=where,
            **({"inputs": tuple(InputFile(**f) for f in inputs)} if inputs else {}),
        ),
        shape=info, shape_error=info_error, files_error=files_error,
        settings=ModelSettings.from_json(settings_dict(model.settings)), memory=system_memory(),
    )
