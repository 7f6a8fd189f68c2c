"""What measures and teaches: bench, chaos, lab. They import the product (and the
demo); the product never imports them.
"""
