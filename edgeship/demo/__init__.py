"""The built-in demo: DigitNet, a small MobileNet-style CNN trained on scikit-learn's digits."""
