"""The scenario: its schema (the single home of every default), its sections, size strings
converted to each key's unit, and how a problem in a file is told (naming the file and key)."""
