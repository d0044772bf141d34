"""``tfdist estimate``: will a training job fit in a device's memory?"""
