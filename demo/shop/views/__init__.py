"""The pages' views, one module per page: thin, the work is in services and selectors."""
