import TrackpipeCLI

Trackpipe.main()
