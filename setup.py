from setuptools import find_packages, setup

setup(
    name="mrclab",
    version="0.1.0",
    description="Mininet testbed for MRC (Multipath Reliable Connection) over static SRv6",
    packages=find_packages(include=["topologies*", "controller*", "endpoints*", "experiments*"]),
    package_data={"topologies.dataplane": ["*.bpf.c"], "experiments": ["reference/*.json"]},
    python_requires=">=3.10",
    install_requires=[
        "os-ken>=4.0",  # Ryu's maintained fork: Ryu 4.34 no longer starts on Python 3.11
        "pyroute2>=0.9",
        "matplotlib>=3.7",
        "orjson>=3.9",  # the agents' traces: their largest item of Python with the stdlib's encoder
    ],
    # pexpect: the CLI's test drives it through a pseudo-terminal, as Mininet's own tests do
    extras_require={"test": ["pytest>=7", "hypothesis>=6", "ruff>=0.5", "mypy>=1.10", "pexpect>=4.8"]},
    entry_points={"console_scripts": ["mrclab=experiments.cli:main"]},
)
