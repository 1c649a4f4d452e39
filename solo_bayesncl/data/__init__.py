"""Datasets the plugin adds to solo-learn's and the checks that run before any model is built."""
