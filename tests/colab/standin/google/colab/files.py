"""google.colab.files: upload() asks the browser for files (here: none can come); download(name) sends one to the
browser (here: it must exist, as Colab checks)."""
import os


def upload(target_dir=""):
    raise NotImplementedError("the Colab stand-in has no browser to upload from: put the file in its content folder")


def download(filename):
    if not os.path.exists(filename):
        raise FileNotFoundError(f"Cannot find file: {filename}")  # Colab's own message
