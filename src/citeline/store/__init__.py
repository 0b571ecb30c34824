"""Storage: one PostgreSQL database holding the catalog, the vectors and the keyword index."""
