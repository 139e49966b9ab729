"""The one compiled part of Roxxel: guarded reads out of shards' memory maps (roxxel/format/_mapread.c).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built (no C
compiler), Roxxel reads with pread instead, slower, and says so (roxxel.format.mapread).
ROXXEL_REQUIRE_MAPREAD=1 makes a failed compile an error (CI and the worker image set it).
"""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "roxxel.format._mapread",
            ["roxxel/format/_mapread.c"],
            extra_compile_args=["-O3", "-fno-strict-aliasing"],
            optional=os.environ.get("ROXXEL_REQUIRE_MAPREAD") != "1",
        )
    ]
)
