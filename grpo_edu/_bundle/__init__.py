"""The course's lessons and bundled assets, shipped inside the package (in a checkout: links to lessons/ and assets/)."""
