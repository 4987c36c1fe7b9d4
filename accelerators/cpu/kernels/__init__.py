"""C sources and headers of the cpu kernel library (a package so they ship in wheels)."""
