"""Check `macprof bandwidth` against a STREAM-style C benchmark on this machine.

Builds a small STREAM (copy, scale, add, triad; OpenMP; best of N) in a temporary folder with
the system C compiler, runs it with the same number of threads as the probe, then runs the
probe, and prints the ratio of the probe's bandwidth to STREAM's best kernel. Apple clang has no
OpenMP: on macOS both sides run one thread (the pragmas are ignored, the timer is POSIX's).
The target: the probe reaches at least 0.9 of it.

    python benchmarks/stream_check.py [--threads N] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

STREAM_C = r"""
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#else
#include <time.h>
static double omp_get_wtime(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int omp_get_max_threads(void) { return 1; }
#endif
#ifndef N
#define N 40000000
#endif
#define NTIMES 10
static double a[N], b[N], c[N];
int main(void) {
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    const double bytes[4] = {2.0 * sizeof(double) * N, 2.0 * sizeof(double) * N,
                             3.0 * sizeof(double) * N, 3.0 * sizeof(double) * N};
    const char *names[4] = {"copy", "scale", "add", "triad"};
    double s = 3.0;
    #pragma omp parallel for
    for (long j = 0; j < N; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }
    for (int k = 0; k < NTIMES; k++) {
        double t;
        t = omp_get_wtime();
        #pragma omp parallel for
        for (long j = 0; j < N; j++) c[j] = a[j];
        t = omp_get_wtime() - t; if (k && t < best[0]) best[0] = t;
        t = omp_get_wtime();
        #pragma omp parallel for
        for (long j = 0; j < N; j++) b[j] = s * c[j];
        t = omp_get_wtime() - t; if (k && t < best[1]) best[1] = t;
        t = omp_get_wtime();
        #pragma omp parallel for
        for (long j = 0; j < N; j++) c[j] = a[j] + b[j];
        t = omp_get_wtime() - t; if (k && t < best[2]) best[2] = t;
        t = omp_get_wtime();
        #pragma omp parallel for
        for (long j = 0; j < N; j++) a[j] = b[j] + s * c[j];
        t = omp_get_wtime() - t; if (k && t < best[3]) best[3] = t;
    }
    printf("{");
    for (int i = 0; i < 4; i++) printf("\"%s\": %.3f%s", names[i], bytes[i] / best[i] / 1e9, i < 3 ? ", " : "");
    printf(", \"threads\": %d, \"check\": %.1f}\n", omp_get_max_threads(), a[N / 2] + b[N / 3] + c[N / 5]);
    return 0;
}
"""


def compile_command(cc: str, src: str, exe: str, platform: str = sys.platform) -> list[str]:
    """Apple clang has no -fopenmp (and arm64 no -mcmodel=medium): a one-thread build there."""
    if platform == "darwin":
        return [cc, "-O3", src, "-o", exe]
    return [cc, "-O3", "-march=native", "-fopenmp", "-mcmodel=medium", src, "-o", exe]


def stream_threads(requested: int, platform: str = sys.platform) -> int:
    return 1 if platform == "darwin" else requested


def run_stream(threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "stream.c", Path(tmp) / "stream"
        src.write_text(STREAM_C)
        cc = os.environ.get("CC", "cc")
        subprocess.run(compile_command(cc, str(src), str(exe)), check=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True,
                             env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.threads = stream_threads(args.threads)  # the probe gets the same count as STREAM
    from macprof.collect import probes as bandwidth

    stream = run_stream(args.threads)
    probe = bandwidth.measure(device="cpu", threads=args.threads)
    best_kernel = max(("copy", "scale", "add", "triad"), key=lambda k: stream[k])
    result = {"threads": args.threads, "stream": stream, "stream_best_kernel": best_kernel,
              "stream_best_gbs": stream[best_kernel], "probe_best_gbs": probe["best_gbs"],
              "probe_median_gbs": probe["median_gbs"], "ratio_best": probe["best_gbs"] / stream[best_kernel],
              "ratio_median": probe["median_gbs"] / stream[best_kernel]}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"STREAM ({args.threads} threads): " + ", ".join(f"{k} {stream[k]:.1f}" for k in ("copy", "scale", "add", "triad"))
              + " GB/s")
        print(f"probe: best {probe['best_gbs']:.1f} GB/s, median {probe['median_gbs']:.1f} GB/s")
        print(f"ratio to STREAM's best kernel ({best_kernel}): best {result['ratio_best']:.3f}, median {result['ratio_median']:.3f}")
    sys.exit(0 if result["ratio_best"] >= 0.9 else 1)


if __name__ == "__main__":
    main()
