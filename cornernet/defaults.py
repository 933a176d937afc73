"""The defaults the API and the commands share, without torch: `cornernet predict`'s --help
prints them and imports nothing heavy (cornernet/commands/__init__.py).
"""

# The one default of `cornernet predict --thresh` and `Detector(thresh=)`: low enough that a
# briefly trained model (whose scores stay low) still shows its boxes, high enough that a
# picture is not covered by the many low-scoring corner pairs; results can be filtered higher
# later (`Result.draw(thresh=)`), never lower.
DEFAULT_THRESH = 0.3
