"""TravelPlanner: variations of its train queries, planned and scored by its constraints."""
