"""Feature matrices (FeatureMatrix messages) as numpy arrays."""

import numpy as np


def to_array(matrix) -> np.ndarray:
    """The matrix as a float32 array of rows × columns (a view of its bytes)."""
    cols = len(matrix.columns)
    values = np.frombuffer(matrix.values, dtype="<f4")
    return values.reshape(matrix.rows, cols) if cols else values.reshape(matrix.rows, 0)
