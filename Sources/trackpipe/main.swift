print("trackpipe")
