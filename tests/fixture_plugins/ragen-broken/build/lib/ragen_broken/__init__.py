raise ImportError("ragen_broken needs a library that is not installed")
