"""The space-time task's data, read without a framework: the built-in moving sprites
(`motion`), whose classes only motion tells apart."""
