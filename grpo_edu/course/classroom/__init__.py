"""Classroom tools: will the lessons run here (``doctor``), a class's answers read (``answers``), the lessons copied
into a student's folder (``copy_lessons``), the course as an offline website (``site``)."""
