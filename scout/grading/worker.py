"""Code-grading worker: ``python -m scout.grading.worker`` reads one JSON request per line and
writes one JSON verdict per line (see ``scout.grading.code.CodeGrader``)."""

from scout.grading.code import serve

if __name__ == "__main__":
    serve()
