"""Does a kernel launched with programmatic dependent launch (PDL: Triton's ``launch_pdl=True`` and
``gdc_wait``) wait for another stream's work that its stream waits for (``wait_stream``, an event)?

    python tools/pdl_cross_stream.py          (a CUDA GPU with PDL: sm_90+; torch and triton only)

Two orders, each with and without PDL, with and without a kernel queued before the wait on the
launching stream (PDL relaxes the edge to the preceding kernel):
  join: the side stream sleeps, then writes ``src``; the current stream waits for it, then the copy
        kernel reads ``src`` (SGLang's ``*_apply``: ``current.wait_stream(side)``, step B);
  fork: the current stream sleeps, then writes ``src``; the side stream waits for it, then the copy
        kernel runs there (``*_prepare``: ``side.wait_stream(current)``, step A).
A copy that reads ``src`` before the write shows as elements that are not 1.  Prints one line per
trial and exits 1 if any PDL trial read early, 0 if none did.
"""
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src, dst, n, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_wait()
    offs = tl.program_id(0) * 1024 + tl.arange(0, 1024)
    mask = offs < n
    x = tl.load(src + offs, mask=mask)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(dst + offs, x, mask=mask)


def trial(order: str, pdl: bool, predecessor: bool, n: int = 1 << 20) -> int:
    src = torch.zeros(n, device="cuda")
    dst = torch.full((n,), -1.0, device="cuda")
    side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    torch.cuda.synchronize()
    writer, reader = (side, cur) if order == "join" else (cur, side)
    with torch.cuda.stream(writer):
        torch.cuda._sleep(50_000_000)  # tens of ms: the reader is launched long before the write
        src.fill_(1.0)
    with torch.cuda.stream(reader):
        if predecessor:
            dst.add_(0.0)  # a kernel just before the wait on the reading stream
        reader.wait_stream(writer)
        _copy[(triton.cdiv(n, 1024),)](src, dst, n, PDL=pdl, launch_pdl=pdl)
    torch.cuda.synchronize()
    return int((dst != 1).sum())


def main() -> int:
    early = 0
    for order in ("join", "fork"):
        for predecessor in (False, True):
            for pdl in (False, True):
                bad = max(trial(order, pdl, predecessor) for _ in range(3))
                early += bad if pdl else 0
                print(f"{order:4s} pdl={int(pdl)} kernel-before-wait={int(predecessor)}: "
                      f"{bad} elements read before the other stream wrote them")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    return 1 if early else 0


if __name__ == "__main__":
    sys.exit(main())
