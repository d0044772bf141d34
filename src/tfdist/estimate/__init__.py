"""``tfdist estimate``: will a training job fit in a device's memory? ``plan`` is the arithmetic (pure),
``result`` what it reports, ``read`` turns a user's model into the shapes it needs, ``device`` finds the
memory to compare against."""
