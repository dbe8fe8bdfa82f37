"""Pool administration: the use cases of pools, above every area a pool's administration drives."""
