"""The audit ledger's reading side: `scheduler reconcile` (docs/reconcile.md)."""
