"""``fuzz --memcheck``: a finished campaign's validation gaps under compute-sanitizer's memcheck.

Each validation-gap row's smallest example (:class:`harness.malformed.GapTable`) runs as its repro
command under ``compute-sanitizer --tool memcheck`` (:func:`harness.malformed.memcheck`); a reported
access turns the row into an ``out of bounds`` finding of the campaign (Note [Malformed consequences]).
Where memcheck cannot run (not CUDA, no compute-sanitizer on PATH) the campaign gets a note instead.
"""

from __future__ import annotations

import dataclasses
import shlex

__all__ = ["memcheck_gaps"]


def memcheck_gaps(campaign) -> None:
    """Run the memcheck of every gap row of ``campaign`` (a running ``fuzz.campaign._Search``)."""
    from kernel_oracle.harness.check import prepared_call
    from kernel_oracle.harness.malformed import memcheck, sanitizer_command

    wheel = campaign.config.sglang_wheel
    for key, row in sorted(campaign.gaps.rows.items(), key=lambda kv: kv[0]):
        example = row["example"] + (f" --sglang-wheel {shlex.quote(str(wheel))}" if wheel else "")
        command = sanitizer_command(example, campaign.device)
        if command is None:
            campaign.memcheck_notes.append(f"--memcheck: not run (device {campaign.device}"
                                           f"{'' if campaign.device != 'cuda' else ', no compute-sanitizer on PATH'})")
            return
        status, summary = memcheck(command)
        if status == "failed":
            campaign.memcheck_notes.append(f"--memcheck of {key[0]} {key[1]}: {summary}")
        elif status == "access":
            campaign.gaps.pop(key)
            case = row["case"]
            verdict = dataclasses.replace(row["verdict"], consequence="out of bounds",
                                          message=f"compute-sanitizer memcheck: {summary}")
            campaign._record(case, verdict, verdict.bucket, prepared_call(case, campaign.device))
