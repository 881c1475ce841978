"""Optional integrations with other systems (each imports its system lazily or on import)."""
