"""Every shared command-line option, defined once; usage errors in one line.

Note [Options]
--------------
One concept has one name in every subcommand, and no other: ``--op`` (a comma-separated list of op
families and ops in every command, :func:`kernel_oracle.harness.family.op_groups`: ``fuzz`` takes one
family's, ``run``, ``mutants`` and ``bench`` whole families), ``--cases`` (a number of cases: a
campaign's, a selfcheck's variations, a mutant's examples, a warm-up's), ``--time`` (seconds, as
``args.time_s``: Note [Time budget] in :mod:`kernel_oracle.fuzz.time_budget`),
``--targets`` (comma-separated target specs, :func:`kernel_oracle.harness.targets.parse_target_list`;
the option may also be repeated), ``--out`` (where the results go: a directory), ``--json`` (also
write the result as one JSON file), ``--device auto|cpu|cuda``, ``--quiet``, ``--seed``, ``--limits``,
``--warm-up``, ``--triton-cache``, ``--sglang-wheel``, ``--gpus``, ``--scheduler``, ``--db``,
``--with-malformed``.  :data:`OPTIONS` holds each one's flag, type and default; a subcommand adds it
with :func:`add`, overriding only what differs there (its help, default or whether it is required).
An option only one subcommand has is defined in that subcommand's module.  A help text names everything
its option accepts today: ``--op``'s lists are built from the families registry, ``--targets``' list of
target kinds and configuration keys is written out (building the parser imports no adapter), and
``oracle_tests/kernel_oracle/test_help_in_step.py`` holds both to the registries.  The tool has not been
released, so a spelling that changed is gone rather than kept as an alias.

Usage errors (docs/semantics.md#exit-codes: exit 2, one line, no traceback): :func:`one_line_errors` makes a parser
print ``kernel-oracle CMD: error: ...`` and a pointer to ``--help`` instead of argparse's usage block.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn, Optional

from kernel_oracle.harness.device import DEVICE_CHOICES
from kernel_oracle.jobs.fuzz_campaign import DEFAULT_SEED
from kernel_oracle.fuzz.time_budget import parse_time_s
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["LIMIT_PRESETS", "OPTIONS", "add", "campaign_op", "cluster_settings", "families", "finite_float",
           "non_negative_int", "non_negative_seconds", "one_line_errors", "op_families_text", "op_help", "op_list",
           "parse_list", "positive_int", "positive_seconds", "timeout_seconds", "wait_seconds"]

# the size presets of kernel_oracle.fuzz.strategies.LIMITS (kept literal: building the parser imports no Hypothesis)
LIMIT_PRESETS = ("tiny", "small", "gpu", "full")


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` report usage errors as one line on stderr, exit code 2."""

    def error(message: str) -> NoReturn:
        text = " ".join(str(message).split()) + _did_you_mean(parser, str(message))
        sys.stderr.write(f"{parser.prog}: error: {text} (see {parser.prog} --help)\n")
        sys.exit(run_outcome(usage_error=True).exit_code)

    parser.error = error  # type: ignore[method-assign]


def _flags(parser: argparse.ArgumentParser) -> set:
    """Every option string of ``parser`` and of its subcommands."""
    found = set()
    for action in parser._actions:
        found.update(action.option_strings)
        for sub in (getattr(action, "choices", None) or {}).values() if isinstance(action, argparse._SubParsersAction) \
                else ():
            found |= _flags(sub)
    return found


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """``; did you mean --seed?`` for an unrecognized option close to one the command line has (a letter
    more, less or different: no two options are that close, so the guess names one)."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    import difflib

    flags = sorted(_flags(parser))
    guesses = [g for word in message.split(":", 1)[1].split() if word.startswith("--")
               for g in difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.8)]
    return f"; did you mean {' or '.join(dict.fromkeys(guesses))}?" if guesses else ""


def finite_float(text: str, what: str = "a number") -> float:
    """An argparse type: ``float(text)``, refusing NaN and infinities with the reason (they compare
    false with every bound, so a NaN budget never ends and a NaN threshold never fires)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} but got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what} but got {text!r}: only finite values (NaN and infinities "
                                         "are refused)")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    value = finite_float(text, "a positive, finite number of seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds but got {text!r}")
    return value


def non_negative_seconds(text: str) -> float:
    """An argparse type: a non-negative, finite number of seconds (0: none)."""
    value = finite_float(text, "a non-negative, finite number of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative, finite number of seconds but got {text!r}")
    return value


def _waitable(value: float, text: str) -> float:
    from kernel_oracle.fuzz.worker import MAX_WAIT_S  # the standard library's only: a light import

    if value > MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_WAIT_S:.0f} seconds (the longest wait this platform "
                                         f"takes) but got {text!r}")
    return value


def timeout_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds that a wait can take (at most
    :data:`kernel_oracle.fuzz.worker.MAX_WAIT_S`: a longer one would overflow the platform's poll)."""
    return _waitable(positive_seconds(text), text)


def wait_seconds(text: str) -> float:
    """:func:`timeout_seconds`, 0 allowed (none)."""
    return _waitable(non_negative_seconds(text), text)


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (a run of no cases tests nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer but got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 case but got {text!r}; a campaign of no cases "
                                         "tests nothing")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer but got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more but got {text!r}")
    return value


def parse_list(value: str, name: str, allowed: Optional[tuple] = None) -> list[str]:
    """The items of a comma-separated option value; ``ValueError`` naming the option when it names
    nothing or an item outside ``allowed``."""
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if not items:
        raise ValueError(f"{name} {value!r} names nothing; pass a comma-separated list")
    bad = [v for v in items if allowed is not None and v not in allowed]
    if bad:
        raise ValueError(f"{name} {value!r}: {bad} unknown; the only valid values are {list(allowed)}")
    return items


class _TargetList(argparse.Action):
    """``--targets a,b`` (or repeated): appends the parsed specs to the list."""

    def __call__(self, parser, namespace, values, option_string=None):
        from kernel_oracle.harness.targets import TargetError, parse_target_list

        try:
            specs = parse_target_list(values)
        except TargetError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        if not specs:
            raise argparse.ArgumentError(self, f"{values!r} names no target; pass a comma-separated list of specs")
        setattr(namespace, self.dest, list(getattr(namespace, self.dest, None) or []) + specs)


# every target kind and configuration key the registry knows (kernel_oracle.fuzz.targets.register_target), written
# out because building the parser imports no adapter; oracle_tests/kernel_oracle/test_help_in_step.py keeps it true
_TARGETS_HELP = ("comma-separated target specs: reference, triton, torch-varlen, flashinfer-cudnn, sglang, sglang-trt, "
                 "sglang-v2, sglang-csgmv (the installed package), sglang==X.Y.Z, sglang-trt==X.Y.Z, sglang-v2==X.Y.Z, "
                 "sglang-csgmv==X.Y.Z (a release), mutant:NAME or package.module[:attr], each optionally with "
                 "@key=value[,key=value...]: triton vision_fp32, lora_early_reads, vision_kernel; sglang-trt "
                 "lora_opti, pdl, cublas, cublas_kv_b; sglang-v2 pdl; sglang-csgmv split_k, deterministic; sglang "
                 "and flashinfer-cudnn engine (a FlashInfer release) (e.g. triton@vision_fp32=tf32)")


def op_families_text() -> str:
    """``lora, vision, csgmv``: the registered families, for a help text (read when the parser is built)."""
    from kernel_oracle.harness.family import FAMILY_OPS

    return ", ".join(FAMILY_OPS)


def op_help(head: str = "comma-separated op families") -> str:
    """``--op``'s help: ``head``, then every registered family and its ops."""
    from kernel_oracle.harness.family import FAMILY_OPS

    return f"{head}: " + "; ".join(f"{name} ({', '.join(ops)})" for name, ops in FAMILY_OPS.items())


# name -> (flags, argparse keywords); a subcommand overrides what differs there
OPTIONS: dict[str, tuple[tuple[str, ...], dict]] = {
    "out": (("--out",), dict(metavar="DIR", help="output directory")),
    "fresh": (("--fresh",), dict(action="store_true",
                                 help="delete what --out holds of an earlier campaign (state, findings, cases, "
                                      ".hypothesis) and start afresh; without it a rerun resumes, and a directory "
                                      "of other code, target, op or seed is refused")),
    "seed": (("--seed",), dict(type=int, default=DEFAULT_SEED, metavar="K", help="random seed")),
    "device": (("--device",), dict(choices=DEVICE_CHOICES, default="auto",
                                   help="auto: the GPU if torch sees one, else the CPU (Triton kernels under the "
                                        "interpreter)")),
    # the time budget: one name (time_s), one check, defaults in one table (Note [Time budget])
    "time": (("--time",), dict(dest="time_s", type=parse_time_s, default=None, metavar="S",
                               help="wall-clock seconds")),
    "cases": (("--cases",), dict(type=positive_int, default=None, metavar="N",
                                 help="cases to execute, shrinking included")),
    "targets": (("--targets",), dict(dest="targets", action=_TargetList, default=None, metavar="SPEC[,SPEC...]",
                                     help=_TARGETS_HELP)),
    "quiet": (("--quiet",), dict(action="store_true", help="no progress output")),
    "op": (("--op",), dict(metavar="OP[,OP...]", help=op_help("comma-separated op families or some of their ops"))),
    "limits": (("--limits",), dict(choices=LIMIT_PRESETS, default=None,
                                   help="problem sizes (default: tiny for interpreted Triton, small for the CPU "
                                        "reference, gpu on a GPU: small and tile-edge heavy with a share of full-size "
                                        "cases)")),
    "warm_up": (("--warm-up",), dict(dest="warm_up_s", type=wait_seconds, default=None, metavar="S",
                                     help="before the clock starts, let the worker warm each target up for up to S "
                                          "seconds (harness.warmup: on CUDA our LoRA kernels' variants compile in "
                                          "parallel); 0: none")),
    "triton_cache": (("--triton-cache",), dict(default=None, metavar="DIR",
                                               help="a directory for Triton's compiled kernels, kept between runs "
                                                    "(TRITON_CACHE_DIR of this process and its workers): a later run "
                                                    "loads binaries instead of compiling")),
    "sglang_wheel": (("--sglang-wheel",), dict(default=None, metavar="PATH|DIR",
                                               help="for sglang==X.Y.Z targets: the release's wheel, or a directory of "
                                                    "wheels (machines without a package registry; default: the cache, "
                                                    "then pip download)")),
    "gpus": (("--gpus",), dict(default=None, metavar="N|all",
                               help="run the campaigns as shards on one pinned Dask worker per GPU of this machine "
                                    "(fuzz.cluster), merged into one report")),
    "scheduler": (("--scheduler",), dict(default=None, metavar="tcp://HOST:8786",
                                         help="run the campaigns as shards on an existing Dask cluster")),
    "db": (("--db",), dict(default=None, metavar="redis://HOST:6379/N",
                           help="with --gpus/--scheduler: one Hypothesis example database in Redis shared by every "
                                "shard (a failure found by one is replayed by all)")),
    "memcheck": (("--memcheck",), dict(action="store_true",
                                       help="on CUDA, after the campaign, run each validation gap's smallest example "
                                            "under compute-sanitizer's memcheck; one that reports an access is an "
                                            "out-of-bounds finding (about half a minute per gap)")),
    "with_malformed": (("--with-malformed",), dict(action="store_true",
                                                   help="for a target without strict validation (sglang==X.Y.Z, a "
                                                        "module without KERNEL_ORACLE_STRICT): count accepted "
                                                        "malformed metadata as findings (default: judged on upstream "
                                                        "contracts; accepted malformed metadata is listed as "
                                                        "validation gaps unless it corrupts defined rows or reads "
                                                        "out of bounds, which are findings always)")),
    "json": (("--json",), dict(dest="json_out", default=None, metavar="PATH", help="also write the result as JSON")),
}


def add(container, name: str, **overrides) -> argparse.Action:
    """Add option ``name`` of :data:`OPTIONS` to ``container`` (a parser or an argument group), with
    ``overrides`` of its keywords."""
    flags, kwargs = OPTIONS[name]
    return container.add_argument(*flags, **{**kwargs, **overrides})


def op_list(value: str) -> dict[str, tuple[str, ...]]:
    """family -> its ops, of a ``--op`` list (:func:`kernel_oracle.harness.family.op_groups`, any
    registered family); ``ValueError`` naming the option."""
    from kernel_oracle.harness.family import FamilyError, op_groups

    try:
        return op_groups(value)
    except FamilyError as exc:
        raise ValueError(f"--op {exc}") from None


def families(value: str) -> list[str]:
    """The op families of a ``--op`` list (``lora,vision``) of a command that takes whole families;
    ``ValueError`` naming the option."""
    from kernel_oracle.harness.family import get_family

    groups = op_list(value)
    part = [op for name, ops in groups.items() if ops != get_family(name).ops for op in ops]
    if part:
        raise ValueError(f"--op {value!r}: {part} {'is' if len(part) == 1 else 'are'} part of a family, and this "
                         f"command takes whole families; pass {','.join(groups)} (kernel-oracle fuzz --op fuzzes "
                         f"single ops)")
    return list(groups)


def campaign_op(value: str) -> str:
    """An argparse type: the ``--op`` list of one campaign (one family, or some of its ops), as the
    campaign's ``op`` text (:func:`kernel_oracle.harness.family.op_text`)."""
    from kernel_oracle.harness.family import FamilyError, campaign_ops, op_text

    try:
        return op_text(*campaign_ops(value))
    except FamilyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cluster_settings(args: argparse.Namespace) -> Optional[dict]:
    """``{"gpus", "scheduler", "db"}`` of ``--gpus`` / ``--scheduler`` / ``--db``, or None when the work
    runs here (without a cluster; ``--db`` is then the caller's to use or refuse); ``ValueError`` (one
    line) for a combination that cannot run."""
    if args.gpus is None and args.scheduler is None:
        return None
    from kernel_oracle.fuzz.cluster import ClusterError, resolve_gpus  # ClusterError is a ValueError

    if args.gpus is not None and args.scheduler is not None:
        raise ClusterError("pass --gpus or --scheduler, not both")
    return {"gpus": resolve_gpus(args.gpus) if args.gpus is not None else None, "scheduler": args.scheduler,
            "db": args.db}
