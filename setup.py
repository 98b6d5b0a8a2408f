"""The optional compiled fast path of the load generator (everything else is in pyproject.toml).

Without a C compiler the build goes on without it and the load generator runs its Python fast path.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "infradoctor.load._fastpath",
            ["src/infradoctor/load/_fastpath.c"],
            optional=True,
        )
    ]
)
