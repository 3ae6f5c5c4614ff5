"""spack-cache-crawler: crawl Spack binary build-cache mirrors into consolidated JSON indexes."""

__version__ = "0.3.0"
