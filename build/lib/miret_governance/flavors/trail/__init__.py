"""The promotion trail: signed records, links, promotion and its lock, approvals, audit, descriptions."""
