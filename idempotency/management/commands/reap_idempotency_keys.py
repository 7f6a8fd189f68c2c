from typing import Any

from django.core.management.base import BaseCommand

from idempotency.services import idempotency_key_reap


class Command(BaseCommand):
    help = "Delete finished idempotency records older than IDEMPOTENCY_KEY_TTL."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--batch-size", type=int, default=1000)

    def handle(self, *args: Any, batch_size: int, **options: Any) -> None:
        result = idempotency_key_reap(batch_size=batch_size)
        self.stdout.write(
            f"deleted={result.deleted} batches={result.batches} "
            f"longest_batch_ms={result.longest_batch_s * 1000:.1f} "
            f"unfinished_kept={result.unfinished_kept}"
        )
