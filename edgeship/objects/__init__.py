"""The object API's side of a build: a ``torch.nn.Module``, example inputs and data in hand become
the model spec the pipeline builds from, with the files it names (``materialize.py``): the module
saved for edgeship's own processes (``saved.py``) and the data as ``.npz`` files (``data.py``).
Nothing is imported here, so the runners' entry (``saved.load_saved``) loads light."""
