"""What one experiment found, and the table of all of them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    """The outcome of one experiment: both sides in words, and the numbers behind them.

    ``counts`` holds every number the sentences quote, read from the database
    (or, for the retry storm, from the server's own counters); tests assert on them.
    ``holds`` names each thing OnceShop's side must show and whether it did: the
    lab fails (exit status 1) when any of them did not, so it can never quietly
    teach that OnceShop's path does damage.
    """

    number: int
    mistake: str
    naive: str
    onceshop: str
    counts: dict[str, float] = field(default_factory=dict)
    holds: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def damage(self) -> list[str]:
        """What OnceShop's side should have shown and did not (empty when it held)."""
        return [claim for claim, held in self.holds.items() if not held]


def markdown_table(findings: list[Finding]) -> str:
    rows = [
        "| # | mistake | naive result | OnceShop result |",
        "|---|---|---|---|",
    ]
    for finding in findings:
        cells = [str(finding.number), finding.mistake, finding.naive, finding.onceshop]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def results_markdown(findings: list[Finding], *, database: str) -> str:
    took = sum(finding.seconds for finding in findings)
    return (
        "# Anti-pattern lab: results\n\n"
        f"Counted in `{database}` after each run ({took:.0f} s in all). "
        "What each experiment does: docs/lab.md.\n\n" + markdown_table(findings)
    )


def exit_status(findings: list[Finding]) -> int:
    """``make lab``'s status: 1 if OnceShop's side of any experiment showed damage."""
    return 1 if any(finding.damage for finding in findings) else 0
