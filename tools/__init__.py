"""Data-preparation and run-inspection scripts (`python -m tools.<name>`).

They import TensorFlow as the binaries do: `binaries` first, for its quiet
TensorFlow start-up (no cuDNN/TensorRT lines) and its TF environment
defaults.
"""

import binaries  # pylint: disable=unused-import
