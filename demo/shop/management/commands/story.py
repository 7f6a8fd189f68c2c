"""`manage.py story`: replay the founding scenario against the running demo."""

import logging
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo.shop.story import (
    ABOUT_S,
    BACKGROUND_WAIT_S,
    GATEWAY_DELAY_S,
    StoryReport,
    StoryStep,
    StoryUnavailable,
    story_run,
)
from edge.money import money

# Where the reconciler's steps for the orphaned capture log.
QUIET_LOGGERS = ("payments", "reconcile")


class Command(BaseCommand):
    help = (
        "Replay the reading's founding scenario (Pay clicked twice, a gateway retry, the "
        "callback three times), then a late success after the customer gave up, against "
        "the running shop, and print what happened in time order."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", help="The shop (default: SHOP_BASE_URL, from PORT).")
        parser.add_argument(
            "--provider-url", help="The provider (default: PROVIDER_BASE_URL, from PORT)."
        )
        parser.add_argument(
            "--operator", default="staff", help="Staff user who scripts the provider's faults."
        )
        parser.add_argument("--gateway-delay", type=float, default=GATEWAY_DELAY_S)
        parser.add_argument("--wait", type=float, default=BACKGROUND_WAIT_S)

    def handle(self, *args: Any, **options: Any) -> None:
        shop = options["base_url"] or settings.SHOP_BASE_URL
        self.stdout.write(f"Running the story against {shop} (about {ABOUT_S} s):")
        started = time.monotonic()

        def progress(part: str) -> None:
            self.stdout.write(f"   [{time.monotonic() - started:5.1f} s] {part} ...")
            self.stdout.flush()

        # The reconciler's steps the story runs log what an operator's log should hold
        # (a success for a failed attempt is an error there, an orphaned capture a
        # warning); here the narration tells them, so their loggers are quiet meanwhile.
        quiet = [logging.getLogger(name) for name in QUIET_LOGGERS]
        levels = [logger.level for logger in quiet]
        for logger in quiet:
            logger.setLevel(logging.CRITICAL)
        try:
            report = story_run(
                base_url=options["base_url"],
                provider_url=options["provider_url"],
                operator=options["operator"],
                gateway_delay_s=options["gateway_delay"],
                wait_s=options["wait"],
                progress=progress,
            )
        except StoryUnavailable as error:
            raise CommandError(str(error)) from error
        finally:
            for logger, level in zip(quiet, levels, strict=True):
                logger.setLevel(level)
        self.stdout.write(f"   [{time.monotonic() - started:5.1f} s] done.")
        for number, step in enumerate(report.steps, start=1):
            self.print_step(number, step)
        self.stdout.write(
            f"\nThe payment of order {report.order_number} was settled by {report.settled_by}."
        )
        self.print_books(report)
        if not report.ok:
            raise CommandError(
                "The books do not show one order, one debit, one shipment, and the late "
                "capture refunded."
            )

    def print_step(self, number: int, step: StoryStep) -> None:
        out = self.stdout
        out.write(f"\n{number}. [{step.at_s:5.1f} s] {step.actor} {step.action}")
        if step.request:
            out.write(f"   {step.request}")
        style = self.style.SUCCESS if step.answer is None or step.answer.ok else self.style.WARNING
        out.write(style(f"   -> {step.result}"))
        if step.explanation:
            out.write(f"   why: {step.explanation}")

    def print_books(self, report: StoryReport) -> None:
        out = self.stdout
        out.write(f"\nThe books for {report.customer} (order {report.order_number}):")
        out.write(f"   {'what':52} {'counted':>12} {'expected':>12}")
        for row in report.tally:
            counted, expected = (
                (money(row.count, row.currency), money(row.expected, row.currency))
                if row.currency
                else (row.count, row.expected)
            )
            line = f"   {row.what:52} {counted:>12} {expected:>12}"
            out.write(self.style.SUCCESS(line) if row.ok else self.style.ERROR(line))
        if report.audit is not None:
            verdict = "clean" if report.audit.ok else f"{len(report.audit.findings)} problem(s)"
            out.write(f"\nThe audit (whole shop): {verdict}")
            out.write(f"   {'check':52} {'checked':>8} {'problems':>9}")
            for summary in report.audit.summary:
                out.write(f"   {summary.check:52} {summary.checked:>8} {summary.problems:>9}")
            for finding in report.audit.findings:
                out.write(self.style.ERROR(f"   {finding.invariant}: {finding.message}"))
        elif report.audit_note:
            out.write(f"\n{report.audit_note}")
        if report.ok:
            out.write(self.style.SUCCESS("\nOne order, one debit, one shipment."))
            out.write(self.style.SUCCESS("The late capture of the order given up: refunded."))
