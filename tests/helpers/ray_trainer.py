"""Ray Train's TensorflowTrainer with Keras 3 model.fit (the model and data of keras_fit.py --plain).

usage: ray_trainer.py OUT --route ROUTE [--address HOST:PORT] [--workers N]
  --route config    TensorflowTrainer(tensorflow_config=tfdist.ray.TensorflowConfig()), the training
                    function unchanged: tf.distribute.MultiWorkerMirroredStrategy() + model.fit
  --route strategy  Ray's own TensorflowConfig; the training function's one line: tfdist.strategy()
  --route fit       as strategy, training with tfdist.fit instead of model.fit
  --route single    no Ray: the same function in this one process (the reference)
Each worker writes OUT/rank-R.weights.npy, OUT/rank-R.predict.npy and OUT/rank-R.json (history, evaluate).
"""

from __future__ import annotations

import argparse
import json
import os


def train_loop(config: dict) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    route = config["route"]
    if route in ("strategy", "fit"):
        import tfdist

        strategy = tfdist.strategy()
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if route == "single":
        rank = 0
    else:
        import ray.train

        rank = ray.train.get_context().get_world_rank()
    global_batch = 48
    rng = np.random.default_rng(0)
    x = rng.normal(size=(480, 8)).astype("float32")
    w_true = rng.normal(size=(8,)).astype("float32")
    y = (x @ w_true > 0).astype("int32")
    x_val = rng.normal(size=(96, 8)).astype("float32")
    y_val = (x_val @ w_true > 0).astype("int32")
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(global_batch)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    if route == "fit":
        import tfdist

        history = tfdist.fit(model, train, epochs=4, validation_data=val, verbose=0)
    else:
        history = model.fit(train, epochs=4, validation_data=val, verbose=0)
    evaluation = model.evaluate(val, return_dict=True, verbose=0)
    predictions = model.predict(val, verbose=0)
    out = config["out"]
    np.save(os.path.join(out, f"rank-{rank}.predict.npy"), predictions)
    np.save(
        os.path.join(out, f"rank-{rank}.weights.npy"),
        np.concatenate([w.ravel() for w in model.get_weights()]),
    )
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"history": history.history, "evaluate": evaluation}, f)
    print(f"rank {rank}: evaluate {evaluation}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--route", choices=("config", "strategy", "fit", "single"), required=True)
    parser.add_argument("--address", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    config = {"route": args.route, "out": os.path.abspath(args.out)}
    if args.route == "single":
        train_loop(config)
        return

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    import tfdist.ray

    ray.init(address=args.address, logging_level="ERROR")
    trainer = TensorflowTrainer(
        train_loop,
        train_loop_config=config,
        tensorflow_config=tfdist.ray.TensorflowConfig() if args.route == "config" else None,
        scaling_config=ScalingConfig(num_workers=args.workers, placement_strategy="STRICT_SPREAD"),
        run_config=RunConfig(storage_path=os.path.join(config["out"], "ray-results"), name="keras-fit"),
    )
    trainer.fit()
    ray.shutdown()


if __name__ == "__main__":
    main()
