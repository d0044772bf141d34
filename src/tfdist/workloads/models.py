"""Named models sized from the dataset: regression, mnist-cnn, resnet50, mobilenetv2, big-gradient."""

from __future__ import annotations

from typing import Any

from tfdist.errors import ConfigError

NAMES = ("regression", "mnist-cnn", "resnet50", "mobilenetv2", "big-gradient")
#: Size of big-gradient's parameter table: 4M floats (16 MB of gradient per step) for almost no compute.
BIG_GRADIENT_PARAMS = 4_000_000


def build(name: str, input_shape: tuple[int, ...], num_classes: int, weights: str | None = None) -> Any:
    """Build (not compile) a Keras 3 model; call inside the strategy scope."""
    import keras

    if name == "regression":
        return keras.Sequential(
            [keras.Input(input_shape), keras.layers.Flatten(), keras.layers.Dense(1)], name="regression"
        )
    if name == "mnist-cnn":
        # conv32-conv64-pool-dropout-dense128-dense10: 1,199,882 parameters at 28x28x1.
        return keras.Sequential(
            [
                keras.Input(input_shape),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.Conv2D(64, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Dropout(0.25),
                keras.layers.Flatten(),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dropout(0.5),
                keras.layers.Dense(num_classes, activation="softmax"),
            ],
            name="mnist_cnn",
        )
    if name == "big-gradient":
        # A linear classifier plus a large parameter table that enters the output through one mean: the
        # compute is tiny and every step all-reduces a 16 MB dense gradient. It exists to show (and test)
        # what a communication-bound job looks like.
        inputs = keras.Input(input_shape)
        logits = keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs))
        from tfdist.workloads.layers import TableShift

        shifted = TableShift(BIG_GRADIENT_PARAMS)(logits)
        return keras.Model(inputs, keras.layers.Softmax()(shifted), name="big_gradient")
    if name in ("resnet50", "mobilenetv2"):
        app = keras.applications.ResNet50 if name == "resnet50" else keras.applications.MobileNetV2
        model = app(
            weights=None, input_shape=input_shape, classes=num_classes, classifier_activation="softmax"
        )
        if weights:
            model.load_weights(weights)
        return model
    raise ConfigError(f"unknown workload {name!r}; choose one of {', '.join(NAMES)}.")
