"""Hostile use: launches from many threads, and bad calls that must fail with a CallError
naming the op, the argument and the sizes, before anything is allocated or launched."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.errors import CallError

THREADS = r"""
import sys, threading, time
import numpy as np
import pyopencl.array as cla
from clforge.generated import ops
from clforge.call.dispatcher import dispatcher

sys.setswitchinterval(1e-6)
q = dispatcher().runtime.queue
sizes = (7, 4096, 100003, 1000003)
rng = np.random.default_rng(0)
data = {n: (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32))
        for n in sizes}
wrong, calls, errors = [0], [0], []

def work(k):
    try:
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline:
            n = sizes[(i + k) % len(sizes)]
            a, b = data[n]
            if i % 2:
                got = ops.relu(cla.to_device(q, a)).get()
                want = np.maximum(a, 0)
            else:
                got = ops.add(a, b)
                want = a + b
            calls[0] += 1
            if not np.array_equal(got, want):
                wrong[0] += 1
            i += 1
    except Exception as exc:  # noqa: BLE001 - reported to the test
        errors.append(repr(exc))

threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(calls[0], wrong[0], errors)
"""


@pytest.mark.slow
def test_launches_from_many_threads_are_safe() -> None:
    done = subprocess.run(
        [sys.executable, "-c", THREADS],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "always"},
    )
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    calls, wrong, errors = done.stdout.split(maxsplit=2)
    assert int(calls) > 100 and int(wrong) == 0 and errors.strip() == "[]"
    assert "retrieved more than once" not in done.stderr


def _pool_blocks() -> int:
    return dispatcher().runtime.pool.active_blocks


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (  # an output beyond the device's largest allocation, or the 32-bit index range
            lambda: ops.matmul(np.ones((2**20, 1), np.float32), np.ones((1, 2**20), np.float32)),
            "matmul: c (shape (1, 1048576, 1048576)) has 1099511627776 elements, beyond the "
            "kernels' 32-bit index range",
        ),
        (  # a view whose host copy could not be made
            lambda: ops.softmax(np.broadcast_to(np.float32(1), (2**16, 2**16))),
            "softmax: x (shape (65536, 65536, 1)) has 4294967296 elements",
        ),
        (  # an output of 2^31 + 4633 elements: the matmul indexes with int
            lambda: ops.matmul(np.ones((46341, 1), np.float32), np.ones((1, 46341), np.float32)),
            "matmul: c (shape (1, 46341, 46341)) has 2147488281 elements",
        ),
        (
            lambda: ops.conv2d(
                np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 3, 3), np.float32), padding=2**30
            ),
            "conv2d: OH = ",
        ),
        (lambda: ops.relu(None), "relu: input 'x' is None; it is required (an array)"),
        (
            lambda: ops.sum(np.ones((3, 4), np.float32), keepdims="no"),
            "sum: keepdims must be True or False, got 'no' (str)",
        ),
        (
            lambda: ops.sum(np.ones((3, 4), np.float32), keepdims=None),
            "sum: keepdims must be True or False, got None (NoneType)",
        ),
        (
            lambda: ops.gemm(
                np.ones((3, 4), np.float32), np.ones((4, 2), np.float32), trans_a="yes"
            ),
            "gemm: trans_a must be True or False, got 'yes' (str)",
        ),
        (
            lambda: ops.relu(np.ma.masked_array(np.ones(4, np.float32), mask=[0, 1, 0, 0])),
            "relu: input 'x' is a NumPy masked array (shape (4,)); clforge would drop its mask",
        ),
        (
            lambda: ops.relu(np.matrix([[1.0, 2.0]], np.float32)),
            "relu: input 'x' is an np.matrix (shape (1, 2))",
        ),
    ],
)
def test_bad_calls_fail_before_anything_is_allocated(call, message: str) -> None:
    dispatcher()  # the default runtime exists before counting its pool's blocks
    before = _pool_blocks()
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value).startswith(message)
    assert _pool_blocks() == before


def test_an_output_beyond_the_largest_allocation_is_refused() -> None:
    rt = dispatcher().runtime
    n = rt.max_alloc // 4 + 1024  # f32 elements: one output just past the limit
    if n > 2**31 - 1:
        pytest.skip("the index-range check comes first on this device")
    x = np.broadcast_to(np.float32(1), (n,))  # no host memory behind it
    with pytest.raises(
        CallError,
        match=r"relu: output 'y' of shape \(\d+,\) needs \d+ bytes, "
        r"more than the device's largest allocation",
    ):
        ops.relu(x)


def test_device_arrays_from_another_context_than_the_queue_given_are_refused() -> None:
    # without queue=, the arrays' own queue runs the call (tests/test_interop.py)
    other = cl.CommandQueue(cl.Context([dispatcher().runtime.device]))
    x = cla.to_device(other, np.ones(4, np.float32))
    with pytest.raises(CallError, match="lives in another OpenCL context than the queue's"):
        ops.relu(x, queue=dispatcher().runtime.queue)
