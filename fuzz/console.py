"""What a campaign shows on the console while it runs: the progress bar."""

from __future__ import annotations

from typing import Optional

__all__ = ["Progress"]


class Progress:
    """A tqdm bar of executed cases (none when disabled or tqdm is absent: same results)."""

    def __init__(self, total: Optional[int], enabled: bool, desc: str):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="case", dynamic_ncols=True)
            except ImportError:  # tqdm is optional at run time: no bar, same results
                self.bar = None

    def update(self, n: int = 1, **postfix) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(**postfix, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
